//! Agentic replay (docs/specs/replay-rules.md): lanes, the warmup and profiling phases, think-time
//! scheduling, the recycle queue and the stop conditions.
//!
//! - **Plan** ([`plan::Plan`]): before anything is sent, the scenario picks every lane's start turn in
//!   one call, mints the lanes' markers, and gives the delay before every turn of every trace.
//! - **Warmup**: one request per lane at its start turn k with the history 0..k, all in flight
//!   together; the phase waits for all of them (with `--warmup-grace-period`, unlimited by default).
//!   A response the scenario classifies as a context overflow is not a failure: it is counted (phase
//!   warmup), the lane's trajectory ends there, and when profiling begins the lane starts the head
//!   trace of the recycle queue at turn 0, as after a profiling overflow. Any other failure aborts
//!   the run: a degraded warmup would skew every number after it.
//! - **Profiling**: each lane resumes at k+1 in a new session carrying the same marker, sends its next
//!   turn when the previous response has ended plus the scenario's delay, and on the last turn or a
//!   context overflow hands its trace to the `recycle::Recycler` and starts the head trace at turn 0
//!   with a new marker.
//! - **Stop**: at the benchmark duration nothing new starts, in-flight requests get the grace period
//!   and are then cancelled (and recorded as cancelled); the failed-request threshold and an interrupt
//!   stop the run early. Every request becomes exactly one [`agentx_record::RequestRecord`], sent to
//!   the sink the moment it completes.
//!
//! Timing: the scheduled (intended) send time of each turn is recorded next to the actual send, and
//! latencies count from the intended time, so scheduler lag is never hidden. Every clock read of
//! the replay goes through tokio (`timer::now`, tokio's sleeps, [`Clock`]), and think times end
//! on `timer::Waker`'s thread unless [`ReplayConfig::timer_thread`] is off, so tests drive the
//! replay on tokio's paused clock.
//!
//! The files: this one runs the phases of the single-stream replay, `lane` a lane's sessions,
//! `request` one request (body, send, record, tally), [`transport`] what the replay needs from a
//! client, [`sched`] the session-tree scheduler, [`graph`] the replay of an Agent Graph IR
//! corpus, `shard.rs` a shard's warmup hand-off to the other
//! shards. The paused-time tests are in `tests.rs` (this replay) and `sched/tests.rs` (the tree
//! scheduler), on a scripted transport (`testkit.rs`).

#![forbid(unsafe_code)]

pub mod arrivals;
mod drain;
pub mod graph;
mod lane;
pub mod plan;
mod prefix;
mod recycle;
mod request;
pub mod sched;
mod session;
mod shard;
#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;
mod threshold;
mod timer;
pub mod tree;
pub mod ui;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};

use agentx_dataset::{AssistantMode, CacheBust, Dataset, PromptSynth, TokenCounter};
use agentx_metrics::scrape_log::Boundary;
pub use agentx_protocol::transport::{self, Transport};
use agentx_protocol::RequestBody;
use agentx_record::{Clock, Phase, RecordSender, RequestRecord};
use agentx_scenario::types::Placement;
use agentx_scenario::ScenarioInstance;
use lane::Warmed;
pub use plan::{Lane, Plan, PlanParams};
use recycle::Recycler;
use session::Session;
use shard::{shard_warmup, WarmEnd};

use crate::ui::{Live, Progress, SrvRow};
use agentx_metrics::live::LiveRun;

/// How a replay runs (the resolved configuration the replay needs).
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    /// How long profiling sends (from its first request to the stop of new sends).
    pub duration: Duration,
    /// In-flight requests may finish this long after the duration; `None` waits for all.
    pub grace: Option<Duration>,
    /// Warmup may take this long; `None` waits for all.
    pub warmup_grace: Option<Duration>,
    /// `--failed-request-threshold`: the failed share of judged profiling requests (0 to 1) above which the run stops; `None` never stops on failures.
    pub failed_request_threshold: Option<f64>,
    /// Where the cache-bust marker goes in each request's messages.
    pub placement: Placement,
    /// Whether assistant turns replay the recorded text or the server's live replies.
    pub mode: AssistantMode,
    /// `--use-server-token-count`: token counts come from the server's `usage` rather than the client's tokenizer.
    pub use_server_token_count: bool,
    /// Phrases overriding the scenario's overflow list (`None`: the scenario's own).
    pub overflow_phrases: Option<Vec<String>>,
    /// The run's id: its first 8 characters start every session and request id, and the scenario
    /// mints the cache-bust markers from it.
    pub run_id: String,
    /// Interval of the progress log line; `None` for none.
    pub stats_interval: Option<Duration>,
    /// Interval of the `Phase warmup progress` heartbeat (aiperf's 30 s); `None` for none.
    pub warmup_progress_interval: Option<Duration>,
    /// `--trace-idle-gap-cap-seconds`: a session waits at most this long between a response and
    /// its next turn during profiling (a single-stream session has nothing in flight while it
    /// waits, so aiperf's per-tree idle cap is a cap on each delay).
    pub trace_idle_cap: Option<Duration>,
    /// Think times end on a timer thread of the replay's own (`timer::Waker`, finer than tokio's
    /// millisecond timer; the default of a run). Off, they end on tokio's timer, which the replay's
    /// paused-time tests drive.
    pub timer_thread: bool,
    /// `--apply-chat-template`: each request's client-side ISL is its prompt rendered by the
    /// model's chat template and counted, off the send path (while the request is in flight).
    pub chat_template: Option<agentx_dataset::chat_template::TemplateCounter>,
    /// Hash each prompt as sent into a block chain of this many words per block and keep it in
    /// the record ([`agentx_record::PromptBlocks`]), for the cache model; `None` hashes nothing.
    pub prompt_chain_block_size: Option<u32>,
    /// How requests carry the agent's tools (`--wire`, the scenario's decision).
    pub wire: agentx_dataset::Wire,
    /// `--reasoning-in-history keep`: the history's assistant turns carry the live reply's
    /// reasoning ([`agentx_protocol::Exchange::reasoning_text`]).
    pub keep_reasoning: bool,
}

/// Why the replay stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The benchmark duration elapsed (the normal end).
    Completed,
    /// A warmup request failed.
    WarmupFailed,
    /// The failed-request threshold was exceeded.
    ThresholdExceeded,
    /// Interrupted (Ctrl-C / SIGTERM).
    Interrupted,
    /// The process ended without finishing (SIGKILL, out of memory, a job's time limit); its
    /// exports were written afterwards by `agentx-host finalize`.
    Killed,
    /// `--target-precision` was reached before the duration: profiling stopped sending and drained
    /// like a completed run (not a cut-short one).
    PrecisionReached,
}

impl StopReason {
    /// Whether the stop cut the run short (anything but [`StopReason::Completed`] and
    /// [`StopReason::PrecisionReached`]).
    pub fn cancelled(self) -> bool {
        !matches!(self, StopReason::Completed | StopReason::PrecisionReached)
    }

    /// The reason's name in the run's artifacts (`completed`, `warmup_failed`, ...); [`StopReason::parse`]
    /// reads it back.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Completed => "completed",
            StopReason::WarmupFailed => "warmup_failed",
            StopReason::ThresholdExceeded => "failed_request_threshold_exceeded",
            StopReason::Interrupted => "interrupted",
            StopReason::Killed => "killed",
            StopReason::PrecisionReached => "target_precision_reached",
        }
    }

    /// The reason [`StopReason::as_str`] names, if any.
    pub fn parse(text: &str) -> Option<StopReason> {
        [
            StopReason::Completed,
            StopReason::WarmupFailed,
            StopReason::ThresholdExceeded,
            StopReason::Interrupted,
            StopReason::Killed,
            StopReason::PrecisionReached,
        ]
        .into_iter()
        .find(|r| r.as_str() == text)
    }
}

/// Counts of a finished replay (profiling phase unless named otherwise).
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Warmup requests that returned or were cancelled (every record of the warmup phase).
    pub warmup_requests: u64,
    /// Warmup requests that failed (context overflows and cancellations excluded).
    pub warmup_failed: u64,
    /// Warmup requests cancelled (by an interrupt or the warmup grace period).
    pub warmup_cancelled: u64,
    /// Warmup responses the scenario classified as context overflows (not failures).
    pub warmup_overflows: u64,
    /// Profiling responses of every kind (ok, failed, overflowed, cancelled).
    pub requests: u64,
    /// Profiling responses that ended well.
    pub ok: u64,
    /// Failures that count against the threshold (overflows and cancellations excluded).
    pub failed: u64,
    /// Profiling responses the scenario classified as context overflows (not failures).
    pub context_overflows: u64,
    /// Profiling requests cancelled (by the stop, the grace period or an interrupt).
    pub cancelled: u64,
    /// Profiling sessions started.
    pub sessions: u64,
    /// Output tokens of the successful profiling responses.
    pub output_tokens: u64,
    /// Input tokens of the successful profiling responses.
    pub input_tokens: u64,
}

impl Tally {
    /// Counts one record by its phase and outcome (the rule of [`agentx_metrics::Outcome`]).
    pub(crate) fn add(&mut self, rec: &RequestRecord) {
        use agentx_metrics::Outcome;
        if rec.phase == Phase::Warmup {
            self.warmup_requests += 1;
            match Outcome::of(rec) {
                Outcome::ContextOverflow => self.warmup_overflows += 1,
                Outcome::Cancelled => self.warmup_cancelled += 1,
                Outcome::Failed => self.warmup_failed += 1,
                Outcome::Ok => {}
            }
            return;
        }
        self.requests += 1;
        match Outcome::of(rec) {
            Outcome::ContextOverflow => self.context_overflows += 1,
            Outcome::Cancelled => self.cancelled += 1,
            Outcome::Failed => self.failed += 1,
            Outcome::Ok => {
                self.ok += 1;
                self.output_tokens += rec.osl;
                self.input_tokens += rec.isl;
            }
        }
    }

    /// The counts of a record stream read back (a run finished after its process ended): every
    /// record counted, and the profiling sessions as the distinct correlation ids.
    pub fn of_records(records: &[RequestRecord]) -> Tally {
        let mut tally = Tally::default();
        let mut sessions = HashSet::new();
        for record in records {
            tally.add(record);
            if record.phase == Phase::Profiling {
                sessions.insert(record.correlation_id.as_str());
            }
        }
        tally.sessions = sessions.len() as u64;
        tally
    }
}

/// The `| eta=…` of a `Phase warmup progress` line: what is left of `total` at the rate `done`
/// went in `elapsed_s` (`eta=?` before anything returned), never less than `floor_s` (time the
/// stage cannot finish before, e.g. primers still spread ahead).
pub(crate) fn eta_field(done: u64, total: u64, elapsed_s: f64, floor_s: f64) -> String {
    if done >= total {
        return format!("eta={:.1}s", floor_s.max(0.0));
    }
    if done == 0 || elapsed_s <= 0.0 {
        return "eta=?".into();
    }
    let left = (total - done) as f64 * elapsed_s / done as f64;
    format!("eta={:.1}s", left.max(floor_s))
}

/// The result of [`run`].
#[derive(Debug, Clone)]
pub struct ReplayOutcome {
    /// Why the replay stopped.
    pub stop: StopReason,
    /// The request counts of both phases.
    pub tally: Tally,
    /// When profiling began and ended (offsets on the run clock); `None` if it never began.
    pub profiling_ns: Option<(u64, u64)>,
    /// A line that explains an early stop.
    pub message: Option<String>,
}

/// Everything a replay borrows for its whole life.
pub struct ReplayInputs {
    /// The corpus the lanes replay.
    pub dataset: Dataset,
    /// Builds each request's prompt text from the corpus's token counts.
    pub synth: PromptSynth,
    /// Counts the client-side input and output tokens of each request.
    pub counter: TokenCounter,
    /// The HTTP side (the client crate's `Client` in a run).
    pub client: Box<dyn Transport>,
    /// Writes each request's body: the endpoint's format, the model, streaming and the extra inputs.
    pub body: RequestBody,
    /// The scenario that plans starts and delays and classifies responses.
    pub scenario: ScenarioInstance,
    /// Where each request's record goes the moment it completes.
    pub records: RecordSender,
    /// The run's clock, which record times are offsets on.
    pub clock: Clock,
    /// Set once to interrupt (first signal: drain; the caller cancels on a second).
    pub interrupt: watch::Receiver<u32>,
    /// Draw a progress bar (stderr is a terminal).
    pub progress: bool,
    /// The latest server figures for the realtime block's `srv` row.
    pub srv_row: Option<SrvRowFn>,
    /// What the run knows about itself while it goes: the replay counts each send, its return,
    /// the busy lanes, the active sessions and the stage here (the record sink's watcher adds the
    /// completed requests), for `--metrics-listen` and the dashboard.
    pub live: Arc<LiveRun>,
    /// Called once when profiling begins (after warmup); benchmarks and the server-metrics window
    /// hang off it.
    pub on_profiling: Option<Box<dyn FnOnce(u64) + Send>>,
    /// Takes a server-metrics scrape at each phase boundary ([`BoundaryHook`]); `None` without a
    /// scraper (and in the replay's unit tests).
    pub boundary: Option<BoundaryHook>,
    /// The other shards of a sharded run; `None` for a run in one process.
    pub shard: Option<ShardLink>,
    /// Set (with the line that says why) when `--target-precision` is reached: profiling stops
    /// sending and drains like a completed run. `None` without a precision target.
    pub early_stop: Option<watch::Receiver<Option<String>>>,
}

/// What one shard's replay exchanges with the other shards of a sharded run (through the run's
/// rendezvous, which owns the network side). The phases stay global: profiling begins only when
/// every shard's warmup returned, and a stop anywhere stops every shard.
pub struct ShardLink {
    /// This shard's index and the shard count: session and request numbers are strided by them
    /// (`n * count + index`), so ids stay unique across the merged run.
    pub index: u32,
    /// The number of shards in the run (at least 1).
    pub count: u32,
    /// This shard's warmup outcome, sent once when its warmup returned (`Err` with why it failed;
    /// a session-tree shard's hand-off offset after the cache-pressure stage in `Ok`).
    pub warmup_done: oneshot::Sender<Result<Option<f64>, String>>,
    /// Every shard's warmup returned (`Ok`, with the smallest hand-off offset of all), or the run
    /// stops (`Err` with why).
    pub profile: oneshot::Receiver<Result<Option<f64>, String>>,
    /// A stop decided elsewhere: another shard's interrupt or failure, or the failed-request
    /// threshold over all shards.
    pub remote_stop: watch::Receiver<Option<(StopReason, String)>>,
    /// This shard's counts, for the failed-request threshold over all shards (which then is not
    /// checked locally).
    pub tally: watch::Sender<Tally>,
    /// A stop decided here (an interrupt), told to the other shards.
    pub local_stop: mpsc::UnboundedSender<(StopReason, String)>,
}

/// A source of the realtime block's `srv` row.
pub type SrvRowFn = Arc<dyn Fn() -> Option<SrvRow> + Send + Sync>;

/// Takes the server-metrics scrape of a phase boundary; the future completes when the scrape is in
/// the scrape log (`client::scrape::Boundaries::take` in a run). The replay awaits it where it
/// decides the profiling counters: `ProfilingStart` after the warmup drained and before the first
/// profiling request, `ProfilingComplete` after the drain (and after profiling's end is noted, so
/// the scrape's time is not profiling time). `ProfilingEnd` (sending stops) is not awaited.
pub type BoundaryHook = Arc<
    dyn Fn(Boundary) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        + Send
        + Sync,
>;

struct Shared {
    cfg: ReplayConfig,
    ds: Dataset,
    synth: PromptSynth,
    counter: TokenCounter,
    client: Box<dyn Transport>,
    body: RequestBody,
    scenario: Mutex<ScenarioInstance>,
    records: RecordSender,
    clock: Clock,
    delays: Vec<Vec<f64>>,
    recycler: Mutex<Recycler>,
    /// Nothing new (session or turn) may start. Both flags are set with `send_replace`: a watch
    /// channel drops a `send` when no receiver lives, and the tree scheduler holds none.
    stop_new: watch::Sender<bool>,
    /// Cancel in-flight requests.
    cancel: watch::Sender<bool>,
    threshold_hit: AtomicBool,
    threshold_tx: watch::Sender<bool>,
    concurrency: u64,
    session_seq: AtomicU64,
    request_seq: AtomicU64,
    /// The run's live counts (requests in flight among them).
    live_run: Arc<LiveRun>,
    tally: Mutex<Tally>,
    run_short: String,
    live: Live,
    progress: Progress,
    srv_row: Option<SrvRowFn>,
    /// Think-time wake-ups (`None` if its thread could not start: tokio's timer then).
    waker: Option<timer::Waker>,
    /// `(index, count)` of a sharded run, `(0, 1)` otherwise.
    stride: (u64, u64),
    /// A sharded run publishes its counts here instead of checking the threshold itself.
    shard_tally: Option<watch::Sender<Tally>>,
    boundary: Option<BoundaryHook>,
    /// The first sender of each prompt block (when the run hashes chains).
    prefix: Option<prefix::Registry>,
}

impl Shared {
    /// Takes the boundary scrape `boundary` and waits until it is in the log (at once without a
    /// scraper).
    async fn boundary(&self, boundary: Boundary) {
        if let Some(take) = &self.boundary {
            take(boundary).await;
        }
    }

    /// Takes the boundary scrape `boundary` without waiting: the task to wait for before the next
    /// one.
    fn boundary_later(&self, boundary: Boundary) -> Option<tokio::task::JoinHandle<()>> {
        self.boundary
            .as_ref()
            .map(|take| tokio::spawn(take(boundary)))
    }
}

/// Runs warmup and profiling to the end. Records go to `inputs.records`; the returned outcome holds
/// the counts and why the run stopped.
pub async fn run(cfg: ReplayConfig, plan: Plan, inputs: ReplayInputs) -> ReplayOutcome {
    let running = plan.lanes.iter().map(|l| l.trace);
    let recycler = Recycler::new(&plan.pool, running, inputs.dataset.len());
    let (shared, rest) = Shared::build(cfg, inputs, plan.delays, recycler, plan.lanes.len() as u64);
    let Rest {
        mut interrupt,
        on_profiling,
        stride,
        link,
        mut remote_stop,
        local_stop,
        mut threshold_rx,
        mut early_stop,
    } = rest;
    let lanes = plan.lanes;
    shared.boundary(Boundary::WarmupStart).await;
    let mut warm = warmup(&shared, &lanes, &mut interrupt).await;
    // A sharded run: tell the others how this warmup ended, and begin profiling only when every
    // shard's warmup returned.
    if let Some((done, profile, ..)) = link {
        let stop = local_stop.as_ref();
        let warm_end = WarmEnd {
            interrupted: &mut warm.interrupted,
            failures: &warm.failures,
            t0_ms: &mut None,
        };
        if let Some(outcome) = shard_warmup(
            &shared,
            warm_end,
            done,
            profile,
            stop,
            stride,
            &mut interrupt,
        )
        .await
        {
            return outcome;
        }
    }
    if warm.interrupted || !warm.failures.is_empty() {
        shared.progress.finish();
        return warmup_stopped(&shared, warm.interrupted, &warm.failures);
    }
    // The warmup drained: the scrape the profiling counters start from, before the first request.
    shared.boundary(Boundary::ProfilingStart).await;
    let (prof_start, deadline, mut tasks) = start_profiling(&shared, &lanes, warm, on_profiling);
    let stops = Stops {
        interrupt: &mut interrupt,
        threshold: &mut threshold_rx,
        remote: remote_stop.as_mut(),
        local: local_stop.as_ref(),
        shard: stride.0,
        early: early_stop.as_mut(),
    };
    let (stop, message) = profile(&shared, &mut tasks, prof_start, deadline, stops).await;
    let sending_stopped = shared.boundary_later(Boundary::ProfilingEnd);
    let (stop, message) = drain(&shared, &mut tasks, &mut interrupt, stop, message).await;
    shared.progress.finish();
    let prof_end = shared.clock.now_ns();
    // Every profiling request returned or was cancelled: the scrape the counters end at.
    if let Some(pending_scrape) = sending_stopped {
        let _ = pending_scrape.await;
    }
    shared.boundary(Boundary::ProfilingComplete).await;
    let tally = shared.tally.lock().expect("tally lock").clone();
    tracing::info!(
        "Phase profiling complete | completed={}, cancelled={}, errors={}, overflows={} | elapsed={:.2}s{}",
        tally.ok,
        tally.cancelled,
        tally.failed,
        tally.context_overflows,
        (prof_end - prof_start) as f64 / 1e9,
        if stop.cancelled() { " | was_cancelled=True" } else { "" }
    );
    ReplayOutcome {
        stop,
        tally,
        profiling_ns: Some((prof_start, prof_end)),
        message,
    }
}

/// How the single-stream warmup ended.
struct Warmup {
    /// When it began on the run clock, and its request count (one per lane).
    start_ns: u64,
    n: usize,
    /// Lanes whose warmup request overflowed the context (they recycle when profiling begins).
    overflowed: HashSet<u32>,
    /// The first profiling turn's conversation of each lane, built during warmup.
    resume: HashMap<u32, Box<agentx_dataset::Conversation>>,
    failures: Vec<String>,
    interrupted: bool,
}

/// The warmup: one request per lane at its start turn, all in flight together, until all of them
/// returned, the warmup grace period ended, or an interrupt.
async fn warmup(
    shared: &Arc<Shared>,
    lanes: &[Lane],
    interrupt: &mut watch::Receiver<u32>,
) -> Warmup {
    tracing::info!(
        lanes = lanes.len(),
        "warmup: one request per lane at its start turn"
    );
    let warm_start = shared.clock.now_ns();
    let mut warm = tokio::task::JoinSet::new();
    for lane in lanes.iter().cloned() {
        let sh = shared.clone();
        warm.spawn(async move {
            let ok = lane::warmup_lane(&sh, &lane, warm_start).await;
            (lane, ok)
        });
    }
    let n = lanes.len();
    shared.progress.phase("warmup", n as u64);
    tracing::info!("Phase warmup started | target: {n} requests");
    let mut heartbeat = tokio::time::interval(
        shared
            .cfg
            .warmup_progress_interval
            .unwrap_or(Duration::from_secs(3600)),
    );
    heartbeat.tick().await;
    let mut returned = 0usize;
    let mut out = Warmup {
        start_ns: warm_start,
        n,
        overflowed: HashSet::new(),
        resume: HashMap::new(),
        failures: Vec::new(),
        interrupted: false,
    };
    let warm_deadline = shared
        .cfg
        .warmup_grace
        .map(|g| tokio::time::Instant::now() + g);
    loop {
        let next = async {
            match warm_deadline {
                Some(d) => tokio::time::timeout_at(d, warm.join_next()).await.ok(),
                None => Some(warm.join_next().await),
            }
        };
        tokio::select! {
            r = next => match r {
                Some(Some(Ok((lane, result)))) => {
                    returned += 1;
                    shared.progress.update(returned as u64, format!("{returned}/{n} warmup requests returned"));
                    warmed(&mut out, returned, &lane, result);
                }
                Some(Some(Err(e))) => out.failures.push(format!("a warmup task failed: {e}")),
                Some(None) => break,
                None => {
                    let _ = shared.cancel.send_replace(true);
                    out.failures.push(format!(
                        "{} of {n} warmup requests did not return within --warmup-grace-period {:?}",
                        n - returned,
                        shared.cfg.warmup_grace.unwrap_or_default()
                    ));
                    while warm.join_next().await.is_some() {}
                    break;
                }
            },
            _ = heartbeat.tick(), if shared.cfg.warmup_progress_interval.is_some() => {
                let tally = shared.tally.lock().expect("tally lock").clone();
                let elapsed = (shared.clock.now_ns() - warm_start) as f64 / 1e9;
                tracing::info!(
                    "Phase warmup progress | returned={returned}/{n} | sent={n} | in_flight={} | errors={} | elapsed={elapsed:.1}s | {}",
                    shared.live_run.requests_in_flight(),
                    tally.warmup_failed,
                    eta_field(returned as u64, n as u64, elapsed, 0.0)
                );
            }
            _ = interrupt.changed() => {
                out.interrupted = true;
                let _ = shared.cancel.send_replace(true);
                while warm.join_next().await.is_some() {}
                break;
            }
        }
    }
    out
}

/// Takes in one lane's returned warmup request (the `returned`-th).
fn warmed(out: &mut Warmup, returned: usize, lane: &Lane, result: Warmed) {
    let n = out.n;
    let status = match &result {
        Warmed::Ok(_) => "ok",
        Warmed::Overflow => "context_overflow",
        Warmed::Failed(_) => "error",
    };
    tracing::info!(
        "WARMUP {returned}/{n} returned {status} (lane {}, trace {}, start_turn={}/{} ({:.1}%))",
        lane.lane,
        lane.trace_id,
        lane.start_turn,
        lane.turns,
        lane.percent()
    );
    match result {
        Warmed::Failed(e) => {
            out.failures
                .push(format!("lane {} trace {}: {e}", lane.lane, lane.trace_id));
        }
        Warmed::Overflow => {
            out.overflowed.insert(lane.lane);
        }
        Warmed::Ok(conv) => {
            if let Some(conversation) = conv {
                out.resume.insert(lane.lane, conversation);
            }
        }
    }
}

/// Profiling begins: each lane resumes at its start turn + 1 (or recycles after a warmup
/// overflow). Returns the start on the run clock, the duration's end, and the lanes' tasks.
fn start_profiling(
    shared: &Arc<Shared>,
    lanes: &[Lane],
    mut warm: Warmup,
    on_profiling: Option<Box<dyn FnOnce(u64) + Send>>,
) -> (u64, Instant, tokio::task::JoinSet<()>) {
    let prof_start = shared.clock.now_ns();
    if let Some(notify) = on_profiling {
        notify(prof_start);
    }
    let deadline = timer::now() + shared.cfg.duration;
    tracing::info!(
        duration_s = shared.cfg.duration.as_secs_f64(),
        "profiling: lanes resume at their start turn + 1"
    );
    {
        let n = warm.n;
        let mut over: Vec<u32> = warm.overflowed.iter().copied().collect();
        over.sort_unstable();
        let list = over
            .iter()
            .map(std::string::ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let tally = shared.tally.lock().expect("tally lock").clone();
        tracing::info!(
            "Phase warmup complete: {n} returned, {} ok, {} context overflow{} | completed={}, cancelled=0, errors={} | elapsed={:.2}s",
            n - over.len() - warm.failures.len(),
            over.len(),
            if over.is_empty() {
                String::new()
            } else {
                format!(
                    " (lanes {list} start the next trace of the recycle queue at turn 0; \
                     warmup overflows count in the overflow rate that decides validity)"
                )
            },
            tally.warmup_requests,
            tally.warmup_failed,
            (prof_start - warm.start_ns) as f64 / 1e9,
        );
        tracing::info!(
            "Phase profiling started | profiling_index=0 | target: {:.1}s duration",
            shared.cfg.duration.as_secs_f64()
        );
    }
    let mut tasks = tokio::task::JoinSet::new();
    for lane in lanes.iter().cloned() {
        let sh = shared.clone();
        let overflowed = warm.overflowed.contains(&lane.lane);
        let conv = warm.resume.remove(&lane.lane);
        tasks
            .spawn(async move { lane::profile_lane(sh, lane, prof_start, overflowed, conv).await });
    }
    (prof_start, deadline, tasks)
}

/// What can stop profiling early.
struct Stops<'a> {
    interrupt: &'a mut watch::Receiver<u32>,
    threshold: &'a mut watch::Receiver<bool>,
    /// A sharded run: a stop decided by another shard, and this shard's stops told to them.
    remote: Option<&'a mut watch::Receiver<Option<(StopReason, String)>>>,
    local: Option<&'a mpsc::UnboundedSender<(StopReason, String)>>,
    shard: u64,
    /// `--target-precision` reached (the line that says so).
    early: Option<&'a mut watch::Receiver<Option<String>>>,
}

/// The line of a reached precision target, when one is; pending forever without a target.
async fn precision_reached(
    early: &mut Option<&mut watch::Receiver<Option<String>>>,
) -> Option<String> {
    shard::once_set(early).await
}

/// Profiling until the duration, a threshold trip, an interrupt (here or in another shard), or
/// every lane done: why it stopped, and a line that explains an early stop.
async fn profile(
    shared: &Arc<Shared>,
    tasks: &mut tokio::task::JoinSet<()>,
    prof_start: u64,
    deadline: Instant,
    stops: Stops<'_>,
) -> (StopReason, Option<String>) {
    let Stops {
        interrupt,
        threshold: threshold_rx,
        mut remote,
        local,
        shard,
        mut early,
    } = stops;
    let mut stop = StopReason::Completed;
    let mut message = None;
    let ticker = shared.cfg.stats_interval;
    let mut tick = tokio::time::interval(ticker.unwrap_or(Duration::from_secs(3600)));
    tick.tick().await;
    let mut bar_tick = tokio::time::interval(Duration::from_millis(500));
    shared
        .progress
        .phase("profiling", shared.cfg.duration.as_secs().max(1));
    // Wait for the duration, a threshold trip or an interrupt.
    let deadline_at = tokio::time::Instant::from_std(deadline);
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(deadline_at) => break,
            _ = threshold_rx.wait_for(|t| *t) => {
                stop = StopReason::ThresholdExceeded;
                let tally = shared.tally.lock().expect("tally lock").clone();
                message = Some(format!(
                    "--failed-request-threshold {} exceeded: {} of {} profiling requests failed; in-flight requests were cancelled",
                    shared.cfg.failed_request_threshold.unwrap_or(0.0), tally.failed, tally.threshold_judged()
                ));
                break;
            }
            _ = interrupt.changed() => {
                (stop, message) = shard::interrupted(local, shard);
                break;
            }
            Some((why, text)) = shard::other_shard(&mut remote) => {
                (stop, message) = shard::stopped_by(why, text);
                break;
            }
            Some(text) = precision_reached(&mut early) => {
                (stop, message) = (StopReason::PrecisionReached, Some(text));
                break;
            }
            _ = tick.tick(), if ticker.is_some() => {
                let srv = shared.srv_row.as_ref().and_then(|f| f());
                let elapsed = Duration::from_nanos(shared.clock.now_ns() - prof_start);
                let tally = shared.tally.lock().expect("tally lock").clone();
                tracing::info!(
                    "Phase profiling progress | returned={} | in_flight={} | errors={} | overflows={} | elapsed={:.1}s",
                    tally.requests,
                    shared.live_run.requests_in_flight(),
                    tally.failed,
                    tally.context_overflows,
                    elapsed.as_secs_f64()
                );
                shared.progress.block(&shared.live.block(elapsed, "profiling", srv.as_ref()));
            }
            _ = bar_tick.tick() => bar(shared, prof_start),
            () = async {}, if tasks.is_empty() => break,
        }
    }
    (stop, message)
}

/// The stop ([`drain::drain`]), with a word on what the grace period waits for.
async fn drain(
    shared: &Shared,
    tasks: &mut tokio::task::JoinSet<()>,
    interrupt: &mut watch::Receiver<u32>,
    stop: StopReason,
    message: Option<String>,
) -> (StopReason, Option<String>) {
    let in_flight = shared.live_run.requests_in_flight();
    if in_flight > 0 && stop != StopReason::ThresholdExceeded {
        tracing::info!(
            in_flight,
            grace_s = shared.cfg.grace.map(|g| g.as_secs_f64()),
            "duration reached; waiting for in-flight requests"
        );
    }
    drain::drain(shared, tasks, interrupt, stop, message).await
}

/// What [`Shared::build`] leaves to the phase loop.
struct Rest {
    interrupt: watch::Receiver<u32>,
    on_profiling: Option<Box<dyn FnOnce(u64) + Send>>,
    stride: (u64, u64),
    #[allow(clippy::type_complexity)]
    link: Option<(
        oneshot::Sender<Result<Option<f64>, String>>,
        oneshot::Receiver<Result<Option<f64>, String>>,
        watch::Receiver<Option<(StopReason, String)>>,
        watch::Sender<Tally>,
        mpsc::UnboundedSender<(StopReason, String)>,
    )>,
    remote_stop: Option<watch::Receiver<Option<(StopReason, String)>>>,
    local_stop: Option<mpsc::UnboundedSender<(StopReason, String)>>,
    threshold_rx: watch::Receiver<bool>,
    early_stop: Option<watch::Receiver<Option<String>>>,
}

impl Shared {
    /// The state every request of a replay shares, from the replay's inputs.
    fn build(
        cfg: ReplayConfig,
        inputs: ReplayInputs,
        delays: Vec<Vec<f64>>,
        recycler: Recycler,
        concurrency: u64,
    ) -> (Arc<Shared>, Rest) {
        let ReplayInputs {
            dataset,
            synth,
            counter,
            client,
            body,
            scenario,
            records,
            clock,
            interrupt,
            progress,
            srv_row,
            live,
            on_profiling,
            boundary,
            shard,
            early_stop,
        } = inputs;
        let (stride, link) = match shard {
            Some(l) => {
                let ShardLink {
                    index,
                    count,
                    warmup_done,
                    profile,
                    remote_stop,
                    tally,
                    local_stop,
                } = l;
                (
                    (u64::from(index), u64::from(count.max(1))),
                    Some((warmup_done, profile, remote_stop, tally, local_stop)),
                )
            }
            None => ((0, 1), None),
        };
        let shard_tally = link.as_ref().map(|l| l.3.clone());
        let remote_stop = link.as_ref().map(|l| l.2.clone());
        let local_stop = link.as_ref().map(|l| l.4.clone());
        let (stop_new, _) = watch::channel(false);
        let (cancel, _) = watch::channel(false);
        let (threshold_tx, threshold_rx) = watch::channel(false);
        let waker = if cfg.timer_thread {
            timer::Waker::start()
                .map_err(|e| tracing::warn!("no timer thread ({e}); think times use tokio's timer"))
                .ok()
        } else {
            None
        };
        let prefix = cfg.prompt_chain_block_size.map(prefix::Registry::new);
        let shared = Arc::new(Shared {
            prefix,
            concurrency,
            run_short: cfg.run_id.chars().take(8).collect(),
            cfg,
            ds: dataset,
            synth,
            counter,
            client,
            body,
            scenario: Mutex::new(scenario),
            records,
            clock,
            delays,
            recycler: Mutex::new(recycler),
            stop_new,
            cancel,
            threshold_hit: AtomicBool::new(false),
            threshold_tx,
            session_seq: AtomicU64::new(0),
            request_seq: AtomicU64::new(0),
            tally: Mutex::new(Tally::default()),
            live: Live::default(),
            progress: Progress::new(progress, live.clone()),
            live_run: live,
            srv_row,
            waker,
            stride,
            shard_tally,
            boundary,
        });
        let rest = Rest {
            interrupt,
            on_profiling,
            stride,
            link,
            remote_stop,
            local_stop,
            threshold_rx,
            early_stop,
        };
        (shared, rest)
    }
}

/// The outcome of a replay stopped in warmup: interrupted, or aborted by `failures`.
fn warmup_stopped(sh: &Shared, interrupted: bool, failures: &[String]) -> ReplayOutcome {
    let tally = sh.tally.lock().expect("tally lock").clone();
    let (stop, message) = if interrupted {
        (
            StopReason::Interrupted,
            "interrupted during warmup; profiling never started".to_string(),
        )
    } else {
        (
            StopReason::WarmupFailed,
            format!(
                "warmup failed, so the run was aborted (metrics on a degraded warmup would mislead): {}",
                failures.join("; ")
            ),
        )
    };
    ReplayOutcome {
        stop,
        tally,
        profiling_ns: None,
        message: Some(message),
    }
}

/// Moves the progress bar: seconds into profiling and the counts.
fn bar(sh: &Shared, prof_start: u64) {
    let tally = sh.tally.lock().expect("tally lock").clone();
    let secs = (sh.clock.now_ns() - prof_start) / 1_000_000_000;
    sh.progress.update(
        secs,
        format!(
            "{secs}/{}s  ok {}  err {}  overflow {}  in flight {}",
            sh.cfg.duration.as_secs(),
            tally.ok,
            tally.failed,
            tally.context_overflows,
            sh.live_run.requests_in_flight()
        ),
    );
}

fn bust(placement: Placement, text: &str) -> Option<CacheBust<'_>> {
    agentx_scenario::check::cache_bust(placement, text)
}
