//! A single-stream lane: its sessions, the warmup request at its start turn, and profiling from
//! there (each turn when the previous response has ended plus the scenario's delay, recycling the
//! trace on its last turn or an overflow).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::request::{prepare, send_turn};
use super::session::{marker, Session};
use super::{bust, Lane, Shared};
use agentx_dataset::AssistantMode;
use agentx_record::Phase;

/// How a lane's warmup request ended.
pub(super) enum Warmed {
    /// With the conversation of the lane's first profiling turn (k+1), built while other warmup
    /// requests are still in flight, so that 256 lanes do not all build theirs when profiling begins
    /// (their sends are due then, and the building would show as send lag).
    Ok(Option<Box<agentx_dataset::Conversation>>),
    /// A context overflow: the trajectory ends, the lane recycles when profiling begins.
    Overflow,
    /// Anything else: the warmup (and so the run) fails.
    Failed(String),
}

pub(super) async fn warmup_lane(sh: &Arc<Shared>, lane: &Lane, start_ns: u64) -> Warmed {
    let traj = sh.ds.trajectory(lane.trace).expect("planned trace exists");
    let conv = match super::request::conversation(sh, traj, lane.start_turn as usize) {
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
                .then(|| super::request::conversation(sh, traj, next).ok())
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
pub(super) async fn profile_lane(
    sh: Arc<Shared>,
    first: Lane,
    prof_start: u64,
    warm_overflowed: bool,
    mut resume: Option<Box<agentx_dataset::Conversation>>,
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
            sh.live_run.session_delta(1);
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
            sh.live_run.session_delta(-1);
        }
        sh.client.end_session(&session.correlation_id);
        let can_start = !*stop.borrow() && !*cancel.borrow();
        let next = sh
            .recycler
            .lock()
            .expect("recycler lock")
            .recycle(session.trace, can_start);
        let Some(next) = next else { return };
        let trace_id = sh
            .ds
            .trajectory(next.trace)
            .expect("pool trace exists")
            .id();
        let new_marker = marker(&sh, session.lane, trace_id, next.recycle_pass);
        session = Session::new(&sh, session.lane, next.trace, next.recycle_pass, new_marker);
        start_turn = 0;
        intended = sh.clock.now_ns();
    }
}

/// Plays a session from `start` until its last turn, an overflow, or the stop; `ready` is its
/// conversation at `start` when it was built beforehand.
pub(super) async fn play_session(
    sh: &Arc<Shared>,
    session: &Session,
    start: usize,
    ready: Option<Box<agentx_dataset::Conversation>>,
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
        None => super::request::conversation(sh, traj, start),
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
        if let Some(reasoning) = &sent.reasoning {
            conv.keep_reasoning(reasoning);
        }
        if let Err(error) = conv.advance(reply) {
            tracing::error!("{error}; the session ends here");
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
                () = sleep_until(sh, due) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }
}

pub(super) async fn sleep_until(sh: &Shared, at: Instant) {
    match &sh.waker {
        Some(w) => w.sleep_until(at).await,
        None => tokio::time::sleep_until(at.into()).await,
    }
}
