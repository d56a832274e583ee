//! Agentic replay (domain.md §2.4-2.10): lanes, the warmup and profiling phases, think-time
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
//!   context overflow hands its trace to the [`recycle::Recycler`] and starts the head trace at turn 0
//!   with a new marker.
//! - **Stop**: at the benchmark duration nothing new starts, in-flight requests get the grace period
//!   and are then cancelled (and recorded as cancelled); the failed-request threshold and an interrupt
//!   stop the run early. Every request becomes exactly one [`RequestRecord`], sent to the sink the
//!   moment it completes.
//!
//! Timing: the scheduled (intended) send time of each turn is recorded next to the actual send, and
//! latencies count from the intended time, so scheduler lag is never hidden.

pub mod plan;
pub mod recycle;
pub mod sched;
pub mod threshold;
pub mod timer;
pub mod transport;
pub mod tree;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};

use crate::client::{Exchange, FailureKind, JsonBody, RequestBody, RequestIds};
use crate::dataset::{AssistantMode, CacheBust, Dataset, PromptSynth, TokenCounter};
use crate::record::{Clock, Phase, RecordError, RecordSender, RequestRecord, TokenSource};
use crate::scenario::types::{ErrorClass, ErrorResponse, Placement, SessionId};
use crate::scenario::ScenarioInstance;
pub use plan::{Lane, Plan, PlanParams};
pub use transport::Transport;
use recycle::Recycler;

use crate::ui::{Live, Progress, SrvRow};

/// How a replay runs (the resolved configuration the replay needs).
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    pub duration: Duration,
    /// In-flight requests may finish this long after the duration; `None` waits for all.
    pub grace: Option<Duration>,
    /// Warmup may take this long; `None` waits for all.
    pub warmup_grace: Option<Duration>,
    pub failed_request_threshold: Option<f64>,
    pub placement: Placement,
    pub mode: AssistantMode,
    pub use_server_token_count: bool,
    /// Phrases overriding the scenario's overflow list (`None`: the scenario's own).
    pub overflow_phrases: Option<Vec<String>>,
    pub run_id: String,
    /// Interval of the progress log line; `None` for none.
    pub stats_interval: Option<Duration>,
    /// Interval of the `Phase warmup progress` heartbeat (aiperf's 30 s); `None` for none.
    pub warmup_progress_interval: Option<Duration>,
    /// `--trace-idle-gap-cap-seconds`: a session waits at most this long between a response and
    /// its next turn during profiling (a single-stream session has nothing in flight while it
    /// waits, so aiperf's per-tree idle cap is a cap on each delay).
    pub trace_idle_cap: Option<Duration>,
    /// Think times end on a timer thread of the replay's own ([`timer::Waker`], finer than tokio's
    /// millisecond timer; the default of a run). Off, they end on tokio's timer, which the replay's
    /// paused-time tests drive.
    pub timer_thread: bool,
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
}

impl StopReason {
    pub fn cancelled(self) -> bool {
        self != StopReason::Completed
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Completed => "completed",
            StopReason::WarmupFailed => "warmup_failed",
            StopReason::ThresholdExceeded => "failed_request_threshold_exceeded",
            StopReason::Interrupted => "interrupted",
        }
    }
}

/// Counts of a finished replay (profiling phase unless named otherwise).
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub warmup_requests: u64,
    /// Warmup failures that abort the run (context overflows excluded).
    pub warmup_failed: u64,
    /// Warmup responses the scenario classified as context overflows (not failures).
    pub warmup_overflows: u64,
    /// Profiling responses of every kind (ok, failed, overflowed, cancelled).
    pub requests: u64,
    pub ok: u64,
    /// Failures that count against the threshold (overflows and cancellations excluded).
    pub failed: u64,
    pub context_overflows: u64,
    pub cancelled: u64,
    pub sessions: u64,
    pub output_tokens: u64,
    pub input_tokens: u64,
}

/// The result of [`run`].
#[derive(Debug, Clone)]
pub struct ReplayOutcome {
    pub stop: StopReason,
    pub tally: Tally,
    /// When profiling began and ended (offsets on the run clock); `None` if it never began.
    pub profiling_ns: Option<(u64, u64)>,
    /// A line that explains an early stop.
    pub message: Option<String>,
}

/// Everything a replay borrows for its whole life.
pub struct ReplayInputs {
    pub dataset: &'static Dataset,
    pub synth: &'static PromptSynth,
    pub counter: TokenCounter,
    /// The HTTP side ([`crate::client::Client`] in a run).
    pub client: Box<dyn Transport>,
    pub body: RequestBody,
    pub scenario: ScenarioInstance,
    pub records: RecordSender,
    pub clock: Clock,
    /// Set once to interrupt (first signal: drain; the caller cancels on a second).
    pub interrupt: watch::Receiver<u32>,
    /// Draw a progress bar (stderr is a terminal).
    pub progress: bool,
    /// The latest server figures for the realtime block's `srv` row.
    pub srv_row: Option<SrvRowFn>,
    /// Called once when profiling begins (after warmup); benchmarks and the server-metrics window
    /// hang off it.
    pub on_profiling: Option<Box<dyn FnOnce(u64) + Send>>,
    /// The other shards of a sharded run; `None` for a run in one process.
    pub shard: Option<ShardLink>,
}

/// What one shard's replay exchanges with the other shards of a sharded run (through the run's
/// rendezvous, which owns the network side). The phases stay global: profiling begins only when
/// every shard's warmup returned, and a stop anywhere stops every shard.
pub struct ShardLink {
    /// This shard's index and the shard count: session and request numbers are strided by them
    /// (`n * count + index`), so ids stay unique across the merged run.
    pub index: u32,
    pub count: u32,
    /// This shard's warmup outcome, sent once when its warmup returned (`Err` with why it failed).
    pub warmup_done: oneshot::Sender<Result<(), String>>,
    /// Every shard's warmup returned (`Ok`), or the run stops (`Err` with why).
    pub profile: oneshot::Receiver<Result<(), String>>,
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

struct Shared {
    cfg: ReplayConfig,
    ds: &'static Dataset,
    synth: &'static PromptSynth,
    counter: TokenCounter,
    client: Box<dyn Transport>,
    body: RequestBody,
    scenario: Mutex<ScenarioInstance>,
    records: RecordSender,
    clock: Clock,
    delays: Vec<Vec<f64>>,
    recycler: Mutex<Recycler>,
    /// Nothing new (session or turn) may start.
    stop_new: watch::Sender<bool>,
    /// Cancel in-flight requests.
    cancel: watch::Sender<bool>,
    threshold_hit: AtomicBool,
    threshold_tx: watch::Sender<bool>,
    concurrency: u64,
    session_seq: AtomicU64,
    request_seq: AtomicU64,
    in_flight: AtomicU64,
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
}

/// How a lane's warmup request ended.
enum Warmed {
    /// With the conversation of the lane's first profiling turn (k+1), built while other warmup
    /// requests are still in flight, so that 256 lanes do not all build theirs when profiling begins
    /// (their sends are due then, and the building would show as send lag).
    Ok(Option<Box<crate::dataset::Conversation<'static>>>),
    /// A context overflow: the trajectory ends, the lane recycles when profiling begins.
    Overflow,
    /// Anything else: the warmup (and so the run) fails.
    Failed(String),
}

/// The exit of one request as the lane sees it.
struct Sent {
    overflow: bool,
    /// The record's error as `message (type)`.
    error: Option<String>,
    reply: Option<String>,
    end: Instant,
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
        mut link,
        mut remote_stop,
        local_stop,
        mut threshold_rx,
    } = rest;
    let lanes = plan.lanes;

    // ---- warmup ----    let lanes = plan.lanes;

    // ---- warmup ----
    tracing::info!(
        lanes = lanes.len(),
        "warmup: one request per lane at its start turn"
    );
    let warm_start = shared.clock.now_ns();
    let mut warm = tokio::task::JoinSet::new();
    for lane in lanes.iter().cloned() {
        let sh = shared.clone();
        warm.spawn(async move {
            let ok = warmup_lane(&sh, &lane, warm_start).await;
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
    let mut failures: Vec<String> = Vec::new();
    let mut warm_overflowed = std::collections::HashSet::new();
    let mut resume = std::collections::HashMap::new();
    let warm_deadline = shared
        .cfg
        .warmup_grace
        .map(|g| tokio::time::Instant::now() + g);
    let mut interrupted = false;
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
                    let status = match &result {
                        Warmed::Ok(_) => "ok",
                        Warmed::Overflow => "context_overflow",
                        Warmed::Failed(_) => "error",
                    };
                    tracing::info!(
                        "WARMUP {returned}/{n} returned {status} (lane {}, trace {}, start_turn={}/{} ({:.1}%))",
                        lane.lane, lane.trace_id, lane.start_turn, lane.turns, lane.percent()
                    );
                    match result {
                        Warmed::Failed(e) => {
                            failures.push(format!("lane {} trace {}: {e}", lane.lane, lane.trace_id));
                        }
                        Warmed::Overflow => {
                            warm_overflowed.insert(lane.lane);
                        }
                        Warmed::Ok(conv) => {
                            if let Some(c) = conv {
                                resume.insert(lane.lane, c);
                            }
                        }
                    }
                }
                Some(Some(Err(e))) => failures.push(format!("a warmup task failed: {e}")),
                Some(None) => break,
                None => {
                    let _ = shared.cancel.send(true);
                    failures.push(format!(
                        "{} of {n} warmup requests did not return within --warmup-grace-period {:?}",
                        n - returned,
                        shared.cfg.warmup_grace.unwrap_or_default()
                    ));
                    while warm.join_next().await.is_some() {}
                    break;
                }
            },
            _ = heartbeat.tick(), if shared.cfg.warmup_progress_interval.is_some() => {
                let t = shared.tally.lock().expect("tally lock").clone();
                tracing::info!(
                    "Phase warmup progress | returned={returned}/{n} | sent={n} | in_flight={} | errors={} | elapsed={:.1}s",
                    shared.in_flight.load(Ordering::Relaxed),
                    t.warmup_failed,
                    (shared.clock.now_ns() - warm_start) as f64 / 1e9
                );
            }
            _ = interrupt.changed() => {
                interrupted = true;
                let _ = shared.cancel.send(true);
                while warm.join_next().await.is_some() {}
                break;
            }
        }
    }
    // A sharded run: tell the others how this warmup ended, and begin profiling only when every
    // shard's warmup returned.
    if let Some((done, profile, ..)) = link.take() {
        let mine = if interrupted {
            Err(format!("shard {} was interrupted during warmup", stride.0))
        } else if !failures.is_empty() {
            Err(format!(
                "shard {} warmup failed: {}",
                stride.0,
                failures.join("; ")
            ))
        } else {
            Ok(())
        };
        let failed_here = mine.is_err();
        let _ = done.send(mine);
        if !failed_here {
            tracing::info!("warmup returned; waiting for every shard's warmup");
            let verdict = tokio::select! {
                v = profile => v.unwrap_or_else(|_| Err("the rendezvous closed before profiling began".into())),
                _ = interrupt.changed() => {
                    interrupted = true;
                    if let Some(tx) = &local_stop {
                        let _ = tx.send((StopReason::Interrupted, format!("shard {} was interrupted", stride.0)));
                    }
                    Ok(())
                }
            };
            if let Err(why) = verdict {
                shared.progress.finish();
                return ReplayOutcome {
                    stop: StopReason::WarmupFailed,
                    tally: shared.tally.lock().expect("tally lock").clone(),
                    profiling_ns: None,
                    message: Some(format!(
                        "another shard's warmup did not succeed, so every shard stopped: {why}"
                    )),
                };
            }
        }
    }
    if interrupted || !failures.is_empty() {
        shared.progress.finish();
        return warmup_stopped(&shared, interrupted, &failures);
    }

    // ---- profiling ----
    let prof_start = shared.clock.now_ns();
    if let Some(f) = on_profiling {
        f(prof_start);
    }
    let deadline = timer::now() + shared.cfg.duration;
    tracing::info!(
        duration_s = shared.cfg.duration.as_secs_f64(),
        "profiling: lanes resume at their start turn + 1"
    );
    {
        let mut over: Vec<u32> = warm_overflowed.iter().copied().collect();
        over.sort_unstable();
        let list = over
            .iter()
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let t = shared.tally.lock().expect("tally lock").clone();
        tracing::info!(
            "Phase warmup complete: {n} returned, {} ok, {} context overflow{} | completed={}, cancelled=0, errors={} | elapsed={:.2}s",
            n - over.len() - failures.len(),
            over.len(),
            if over.is_empty() {
                String::new()
            } else {
                format!(
                    " (lanes {list} start the next trace of the recycle queue at turn 0; \
                     warmup overflows count in the overflow rate that decides validity)"
                )
            },
            t.warmup_requests,
            t.warmup_failed,
            (prof_start - warm_start) as f64 / 1e9,
        );
        tracing::info!(
            "Phase profiling started | profiling_index=0 | target: {:.1}s duration",
            shared.cfg.duration.as_secs_f64()
        );
    }
    let mut tasks = tokio::task::JoinSet::new();
    for lane in lanes.iter().cloned() {
        let sh = shared.clone();
        let overflowed = warm_overflowed.contains(&lane.lane);
        let conv = resume.remove(&lane.lane);
        tasks.spawn(async move { profile_lane(sh, lane, prof_start, overflowed, conv).await });
    }
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
    let dl = tokio::time::Instant::from_std(deadline);
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(dl) => break,
            _ = threshold_rx.wait_for(|t| *t) => {
                stop = StopReason::ThresholdExceeded;
                let t = shared.tally.lock().expect("tally lock").clone();
                message = Some(format!(
                    "--failed-request-threshold {} exceeded: {} of {} profiling requests failed; in-flight requests were cancelled",
                    shared.cfg.failed_request_threshold.unwrap_or(0.0), t.failed, t.threshold_judged()
                ));
                break;
            }
            _ = interrupt.changed() => {
                stop = StopReason::Interrupted;
                message = Some("interrupted: no new turns were started and in-flight requests were drained".into());
                if let Some(tx) = &local_stop {
                    let _ = tx.send((StopReason::Interrupted, format!("shard {} was interrupted", stride.0)));
                }
                break;
            }
            Some((why, text)) = async {
                match remote_stop.as_mut() {
                    Some(rx) => rx.wait_for(Option::is_some).await.ok().and_then(|v| v.clone()),
                    None => std::future::pending().await,
                }
            } => {
                // Another shard's stop: the threshold cancels in-flight requests, anything else
                // drains them like an interrupt.
                stop = if why == StopReason::ThresholdExceeded { why } else { StopReason::Interrupted };
                message = Some(text);
                break;
            }
            _ = tick.tick(), if ticker.is_some() => {
                let srv = shared.srv_row.as_ref().and_then(|f| f());
                let elapsed = Duration::from_nanos(shared.clock.now_ns() - prof_start);
                let t = shared.tally.lock().expect("tally lock").clone();
                tracing::info!(
                    "Phase profiling progress | returned={} | in_flight={} | errors={} | overflows={} | elapsed={:.1}s",
                    t.requests,
                    shared.in_flight.load(Ordering::Relaxed),
                    t.failed,
                    t.context_overflows,
                    elapsed.as_secs_f64()
                );
                shared.progress.block(&shared.live.block(elapsed, "profiling", srv.as_ref()));
            }
            _ = bar_tick.tick() => bar(&shared, prof_start),
            _ = async {}, if tasks.is_empty() => break,
        }
    }
    let _ = shared.stop_new.send(true);
    if stop == StopReason::ThresholdExceeded {
        let _ = shared.cancel.send(true);
    }
    // Drain: in-flight requests get the grace period (a second interrupt cancels them at once).
    let grace = shared.cfg.grace.map(|g| tokio::time::Instant::now() + g);
    let drain = async {
        let in_flight = shared.in_flight.load(Ordering::Relaxed);
        if in_flight > 0 && stop != StopReason::ThresholdExceeded {
            tracing::info!(
                in_flight,
                grace_s = shared.cfg.grace.map(|g| g.as_secs_f64()),
                "duration reached; waiting for in-flight requests"
            );
        }
        loop {
            let again = interrupt.changed();
            let timeout = async {
                match grace {
                    Some(g) => tokio::time::sleep_until(g).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = tasks.join_next() => if r.is_none() { break },
                _ = timeout => {
                    tracing::warn!("grace period over; cancelling in-flight requests");
                    let _ = shared.cancel.send(true);
                    while tasks.join_next().await.is_some() {}
                    break;
                }
                _ = again => {
                    if stop == StopReason::Completed {
                        stop = StopReason::Interrupted;
                        message = Some("interrupted while draining; in-flight requests were cancelled".into());
                    }
                    let _ = shared.cancel.send(true);
                    while tasks.join_next().await.is_some() {}
                    break;
                }
            }
        }
    };
    drain.await;
    shared.progress.finish();
    let prof_end = shared.clock.now_ns();
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

/// What [`Shared::build`] leaves to the phase loop.
struct Rest {
    interrupt: watch::Receiver<u32>,
    on_profiling: Option<Box<dyn FnOnce(u64) + Send>>,
    stride: (u64, u64),
    #[allow(clippy::type_complexity)]
    link: Option<(
        oneshot::Sender<Result<(), String>>,
        oneshot::Receiver<Result<(), String>>,
        watch::Receiver<Option<(StopReason, String)>>,
        watch::Sender<Tally>,
        mpsc::UnboundedSender<(StopReason, String)>,
    )>,
    remote_stop: Option<watch::Receiver<Option<(StopReason, String)>>>,
    local_stop: Option<mpsc::UnboundedSender<(StopReason, String)>>,
    threshold_rx: watch::Receiver<bool>,
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
            on_profiling,
            shard,
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
        let shared = Arc::new(Shared {
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
            in_flight: AtomicU64::new(0),
            tally: Mutex::new(Tally::default()),
            live: Live::default(),
            progress: Progress::new(progress),
            srv_row,
            waker,
            stride,
            shard_tally,
        });
        let rest = Rest {
            interrupt,
            on_profiling,
            stride,
            link,
            remote_stop,
            local_stop,
            threshold_rx,
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
    let t = sh.tally.lock().expect("tally lock").clone();
    let secs = (sh.clock.now_ns() - prof_start) / 1_000_000_000;
    sh.progress.update(
        secs,
        format!(
            "{secs}/{}s  ok {}  err {}  overflow {}  in flight {}",
            sh.cfg.duration.as_secs(),
            t.ok,
            t.failed,
            t.context_overflows,
            sh.in_flight.load(Ordering::Relaxed)
        ),
    );
}

/// The marker text of a session.
fn marker(sh: &Shared, lane: u32, trace_id: &str, recycle_pass: u32) -> String {
    let sid = SessionId {
        run_id: sh.cfg.run_id.clone(),
        recycle_pass,
        lane,
        trace_id: trace_id.to_owned(),
    };
    match sh
        .scenario
        .lock()
        .expect("scenario lock")
        .cache_bust(sh.cfg.placement, &sid)
    {
        Ok(m) => m.text,
        Err(e) => {
            tracing::error!("{e}; this session goes without a cache-bust marker");
            String::new()
        }
    }
}

fn bust(placement: Placement, text: &str) -> Option<CacheBust<'_>> {
    crate::scenario::check::cache_bust(placement, text)
}

/// One session's identity while it runs.
#[derive(Clone)]
struct Session {
    lane: u32,
    trace: usize,
    recycle_pass: u32,
    marker: String,
    correlation_id: String,
    session_num: u64,
    /// A stream of a session tree: its place in the tree (the record's prefix stamp is per turn).
    tree: Option<crate::record::TreeInfo>,
}

impl Session {
    fn new(sh: &Shared, lane: u32, trace: usize, recycle_pass: u32, marker: String) -> Session {
        let session_num =
            sh.session_seq.fetch_add(1, Ordering::Relaxed) * sh.stride.1 + sh.stride.0;
        Session {
            lane,
            trace,
            recycle_pass,
            marker,
            correlation_id: format!("{}-s{session_num}", sh.run_short),
            session_num,
            tree: None,
        }
    }
}

async fn warmup_lane(sh: &Arc<Shared>, lane: &Lane, start_ns: u64) -> Warmed {
    let traj = sh.ds.trajectory(lane.trace).expect("planned trace exists");
    let conv = match sh
        .synth
        .conversation(traj, lane.start_turn as usize, sh.cfg.mode)
    {
        Ok(c) => c,
        Err(e) => return Warmed::Failed(e.to_string()),
    };
    let session = Session::new(sh, lane.lane, lane.trace, 0, lane.marker.clone());
    let mut cancel = sh.cancel.subscribe();
    let req = prepare(sh, &session, &conv);
    let sent = send_turn(sh, &session, req, Phase::Warmup, start_ns, &mut cancel).await;
    sh.client.end_session(&session.correlation_id);
    match sent.error {
        None => {
            let next = lane.start_turn as usize + 1;
            let conv = (next < traj.num_turns())
                .then(|| sh.synth.conversation(traj, next, sh.cfg.mode).ok())
                .flatten()
                .map(|c| {
                    // Writes (and, live, caches) the history's JSON: the costly part of a body.
                    let _ = c.messages_json_parts(bust(sh.cfg.placement, &lane.marker));
                    Box::new(c)
                });
            Warmed::Ok(conv)
        }
        Some(_) if sent.overflow => Warmed::Overflow,
        Some(e) => Warmed::Failed(e),
    }
}

/// `warm_overflowed`: the lane's warmup request overflowed the context, so its trajectory is over and
/// the lane goes straight to the recycle queue. `resume`: the first profiling turn's conversation,
/// built during warmup.
async fn profile_lane(
    sh: Arc<Shared>,
    first: Lane,
    prof_start: u64,
    warm_overflowed: bool,
    mut resume: Option<Box<crate::dataset::Conversation<'static>>>,
) {
    let mut cancel = sh.cancel.subscribe();
    let mut stop = sh.stop_new.subscribe();
    // The first session resumes after the warmup turn with the warmup's marker (an overflowed
    // warmup leaves nothing to resume: the loop below recycles at once).
    let mut session = Session::new(&sh, first.lane, first.trace, 0, first.marker.clone());
    let mut start_turn = if warm_overflowed {
        usize::MAX
    } else {
        first.start_turn as usize + 1
    };
    let mut intended = prof_start;
    loop {
        let traj = sh
            .ds
            .trajectory(session.trace)
            .expect("planned trace exists");
        if start_turn < traj.num_turns() {
            sh.tally.lock().expect("tally lock").sessions += 1;
            let ready = resume.take();
            play_session(
                &sh,
                &session,
                start_turn,
                ready,
                intended,
                &mut cancel,
                &mut stop,
            )
            .await;
        }
        sh.client.end_session(&session.correlation_id);
        let can_start = !*stop.borrow() && !*cancel.borrow();
        let next = sh
            .recycler
            .lock()
            .expect("recycler lock")
            .recycle(session.trace, can_start);
        let Some(next) = next else { return };
        let id = sh
            .ds
            .trajectory(next.trace)
            .expect("pool trace exists")
            .id();
        let m = marker(&sh, session.lane, id, next.recycle_pass);
        session = Session::new(&sh, session.lane, next.trace, next.recycle_pass, m);
        start_turn = 0;
        intended = sh.clock.now_ns();
    }
}

/// Plays a session from `start` until its last turn, an overflow, or the stop; `ready` is its
/// conversation at `start` when it was built beforehand.
async fn play_session(
    sh: &Arc<Shared>,
    session: &Session,
    start: usize,
    ready: Option<Box<crate::dataset::Conversation<'static>>>,
    mut intended: u64,
    cancel: &mut watch::Receiver<bool>,
    stop: &mut watch::Receiver<bool>,
) {
    let traj = sh
        .ds
        .trajectory(session.trace)
        .expect("planned trace exists");
    let built = match ready {
        Some(c) => Ok(*c),
        None => sh.synth.conversation(traj, start, sh.cfg.mode),
    };
    let mut conv = match built {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{e}; the session is skipped");
            return;
        }
    };
    let mut req = prepare(sh, session, &conv);
    loop {
        if *stop.borrow() || *cancel.borrow() {
            return;
        }
        let sent = send_turn(sh, session, req, Phase::Profiling, intended, cancel).await;
        if sent.overflow {
            tracing::info!(
                "terminating trajectory {} early at turn {}/{} (context overflow)",
                traj.id(),
                conv.turn(),
                traj.num_turns()
            );
            return;
        }
        if conv.is_final() {
            return;
        }
        // The next body is built during the think time, so synthesis never delays a send.
        let reply = match sh.cfg.mode {
            AssistantMode::Live => sent.reply.as_deref(),
            AssistantMode::Recorded => None,
        };
        if let Err(e) = conv.advance(reply) {
            tracing::error!("{e}; the session ends here");
            return;
        }
        req = prepare(sh, session, &conv);
        let recorded = sh.delays[session.trace][conv.turn()];
        let delay = sh
            .cfg
            .trace_idle_cap
            .map_or(recorded, |c| recorded.min(c.as_secs_f64()));
        let due = sent.end + Duration::from_secs_f64(delay);
        intended = sh.clock.ns_of(due);
        if delay > 0.0 {
            tokio::select! {
                _ = sleep_until(sh, due) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }
}

async fn sleep_until(sh: &Shared, at: Instant) {
    match &sh.waker {
        Some(w) => w.sleep_until(at).await,
        None => tokio::time::sleep_until(at.into()).await,
    }
}

/// A request ready to send.
struct Prepared {
    body: JsonBody,
    request_id: String,
    trace_id: &'static str,
    turn: u32,
    num_turns: u32,
    max_tokens: u32,
    /// Client-side prompt tokens (word model or tokenizer), marker included.
    client_isl: u64,
    /// The turn's theoretical prefix-cache stamp (hit blocks, total blocks); session trees only.
    prefix: (u32, u32),
    /// The turn's source request in its trace (outer index, inner index); session trees only.
    source_idx: (Option<u32>, Option<u32>),
}

/// Writes the conversation's current turn as a request body.
fn prepare(
    sh: &Shared,
    session: &Session,
    conv: &crate::dataset::Conversation<'static>,
) -> Prepared {
    let traj = conv.trajectory();
    let turn = conv.turn();
    let max_tokens = traj
        .turn(turn)
        .map(|t| t.output_tokens())
        .unwrap_or(1)
        .max(1);
    let bust = bust(sh.cfg.placement, &session.marker);
    let body = sh.body.build(max_tokens, conv.messages_json_parts(bust));
    let seq = sh.request_seq.fetch_add(1, Ordering::Relaxed) * sh.stride.1 + sh.stride.0;
    let client_isl = conv.prompt_words() + sh.counter.count(&session.marker);
    Prepared {
        body,
        request_id: format!("{}-r{seq}", sh.run_short),
        trace_id: traj.id(),
        turn: turn as u32,
        num_turns: traj.num_turns() as u32,
        max_tokens,
        client_isl,
        prefix: (0, 0),
        source_idx: (None, None),
    }
}

/// Sends a prepared request and records it.
async fn send_turn(
    sh: &Arc<Shared>,
    session: &Session,
    mut req: Prepared,
    phase: Phase,
    intended: u64,
    cancel: &mut watch::Receiver<bool>,
) -> Sent {
    let keep_text = sh.cfg.mode == AssistantMode::Live || !sh.cfg.use_server_token_count;
    /// Counts the request in flight until it returns, or until its task unwinds.
    struct InFlight<'a>(&'a AtomicU64);
    impl Drop for InFlight<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::Relaxed);
        }
    }
    sh.in_flight.fetch_add(1, Ordering::Relaxed);
    let in_flight = InFlight(&sh.in_flight);
    let ex = sh
        .client
        .send(
            std::mem::take(&mut req.body),
            RequestIds {
                request_id: &req.request_id,
                correlation_id: &session.correlation_id,
                parent_correlation_id: session
                    .tree
                    .as_ref()
                    .and_then(|t| t.parent_correlation_id.as_deref()),
                last: req.turn + 1 >= req.num_turns,
            },
            keep_text,
            cancel,
        )
        .await;
    drop(in_flight);
    let rec = to_record(sh, session, req, phase, intended, &ex);
    let sent = Sent {
        overflow: rec.context_overflow,
        error: rec
            .error
            .as_ref()
            .map(|e| format!("{} ({})", e.message, e.kind)),
        reply: (rec.error.is_none() && keep_text).then_some(ex.text),
        end: ex.end,
    };
    account(sh, &rec);
    sh.records.send(rec);
    sent
}

fn to_record(
    sh: &Shared,
    session: &Session,
    req: Prepared,
    phase: Phase,
    intended: u64,
    ex: &Exchange,
) -> RequestRecord {
    let usage = ex.usage.unwrap_or_default();
    let server = sh.cfg.use_server_token_count
        && usage.prompt_tokens.is_some()
        && usage.completion_tokens.is_some();
    let (isl, osl, token_source) = if server {
        (
            usage.prompt_tokens.unwrap_or(0),
            usage.completion_tokens.unwrap_or(0),
            TokenSource::Server,
        )
    } else {
        (
            req.client_isl,
            sh.counter.count(&ex.text),
            TokenSource::Client,
        )
    };
    let mut context_overflow = false;
    let error = ex.failure.as_ref().map(|f| {
        let mut kind = f.kind.as_str().to_string();
        if f.kind != FailureKind::Cancelled {
            let body = ex.error_body.clone().unwrap_or_else(|| f.message.clone());
            let resp = ErrorResponse {
                status: f.status,
                body_excerpt: body,
            };
            let phrases = sh.cfg.overflow_phrases.as_deref();
            match sh
                .scenario
                .lock()
                .expect("scenario lock")
                .classify_error(&resp, phrases)
            {
                Ok(c) if c.class == ErrorClass::ContextOverflow => {
                    context_overflow = true;
                    kind = "context_overflow".into();
                }
                Ok(_) => {}
                Err(e) => tracing::error!("{e}; the error counts as an ordinary failure"),
            }
        }
        if let Some(t) = &f.server_type {
            kind = format!("{kind}:{t}");
        }
        RecordError {
            code: f.status,
            kind,
            message: f.message.clone(),
        }
    });
    let cancelled = ex
        .failure
        .as_ref()
        .is_some_and(|f| f.kind == FailureKind::Cancelled);
    let send_ns = sh.clock.ns_of(ex.sent);
    RequestRecord {
        request_id: req.request_id,
        correlation_id: session.correlation_id.clone(),
        session_num: session.session_num,
        phase,
        lane: session.lane,
        trace_id: req.trace_id.to_owned(),
        turn: req.turn,
        num_turns: req.num_turns,
        recycle_pass: session.recycle_pass,
        intended_ns: intended.min(send_ns),
        send_ns,
        first_byte_ns: ex.first_byte.map(|t| sh.clock.ns_of(t)),
        first_token_ns: ex.first_token().map(|t| sh.clock.ns_of(t)),
        chunk_offsets_ns: ex.chunk_offsets_ns.clone(),
        end_ns: sh.clock.ns_of(ex.end),
        isl,
        osl,
        token_source,
        usage,
        max_tokens: req.max_tokens,
        finish_reason: ex.finish_reason.clone(),
        cancelled,
        context_overflow,
        error,
        retry: ex.retried.clone(),
        tree: session.tree.clone().map(|mut t| {
            (t.prefix_hit_blocks, t.prefix_total_blocks) = req.prefix;
            (t.source_outer_idx, t.source_inner_idx) = req.source_idx;
            t
        }),
    }
}

/// A request that failed before (or instead of) an exchange with the server.
struct FailedRequest {
    trace_id: &'static str,
    turn: u32,
    num_turns: u32,
    max_tokens: u32,
    phase: Phase,
    intended: u64,
    /// The record error's class (`type`) and message.
    kind: &'static str,
    message: String,
}

/// The record of a [`FailedRequest`]: an error with no response, sent and ended now.
fn failed_record(sh: &Shared, session: &Session, f: FailedRequest) -> RequestRecord {
    let seq = sh.request_seq.fetch_add(1, Ordering::Relaxed) * sh.stride.1 + sh.stride.0;
    let now = sh.clock.now_ns();
    RequestRecord {
        request_id: format!("{}-r{seq}", sh.run_short),
        correlation_id: session.correlation_id.clone(),
        session_num: session.session_num,
        phase: f.phase,
        lane: session.lane,
        trace_id: f.trace_id.to_owned(),
        turn: f.turn,
        num_turns: f.num_turns,
        recycle_pass: session.recycle_pass,
        intended_ns: f.intended.min(now),
        send_ns: now,
        first_byte_ns: None,
        first_token_ns: None,
        chunk_offsets_ns: Vec::new(),
        end_ns: now,
        isl: 0,
        osl: 0,
        token_source: TokenSource::Client,
        usage: Default::default(),
        max_tokens: f.max_tokens,
        finish_reason: None,
        cancelled: false,
        context_overflow: false,
        error: Some(RecordError {
            code: 0,
            kind: f.kind.to_owned(),
            message: f.message,
        }),
        retry: None,
        tree: session.tree.clone(),
    }
}

/// Counts a record and trips the failed-request threshold.
fn account(sh: &Shared, rec: &RequestRecord) {
    sh.live.record(rec);
    let mut t = sh.tally.lock().expect("tally lock");
    if rec.phase == Phase::Warmup {
        t.warmup_requests += 1;
        if rec.context_overflow {
            t.warmup_overflows += 1;
        } else if rec.error.is_some() {
            t.warmup_failed += 1;
        }
        return;
    }
    t.requests += 1;
    match crate::metrics::Outcome::of(rec) {
        crate::metrics::Outcome::ContextOverflow => t.context_overflows += 1,
        crate::metrics::Outcome::Cancelled => t.cancelled += 1,
        crate::metrics::Outcome::Failed => t.failed += 1,
        crate::metrics::Outcome::Ok => {
            t.ok += 1;
            t.output_tokens += rec.osl;
            t.input_tokens += rec.isl;
        }
    }
    if let Some(tx) = &sh.shard_tally {
        // The threshold is over all shards' records: the rendezvous sums and decides.
        tx.send_replace(t.clone());
        return;
    }
    if let Some(f) = sh.cfg.failed_request_threshold {
        // Judged after every record but an overflow's (aiperf counts an overflow, then judges at
        // the next record).
        if !rec.context_overflow
            && t.threshold_exceeded(f, sh.concurrency)
            && !sh.threshold_hit.swap(true, Ordering::Relaxed)
        {
            let _ = sh.threshold_tx.send(true);
        }
    }
}
