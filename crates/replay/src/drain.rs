//! The stop of a replay, one rule for both worlds: once the run stops, nothing new starts and the
//! requests in flight get the grace period; a second interrupt, the end of the grace period or a
//! crossed failure threshold cancels them at once.

use tokio::sync::watch;

use super::{Shared, StopReason};

/// The requests a replay has in flight, as the drain waits on them.
pub(super) trait InFlight {
    /// Waits for the next request task to end and takes in what it gave; `false` when none is left.
    async fn next_done(&mut self) -> bool;
    /// Waits for every request task to end (they were cancelled), dropping what they gave.
    async fn abandon(&mut self);
}

impl InFlight for tokio::task::JoinSet<()> {
    async fn next_done(&mut self) -> bool {
        self.join_next().await.is_some()
    }

    async fn abandon(&mut self) {
        while self.join_next().await.is_some() {}
    }
}

/// Stops new work, then waits out `tasks` under the grace period. Returns the stop and its
/// message, turned into an interrupt when a second signal cut a completed run's drain short.
pub(super) async fn drain(
    shared: &Shared,
    tasks: &mut impl InFlight,
    interrupt: &mut watch::Receiver<u32>,
    mut stop: StopReason,
    mut message: Option<String>,
) -> (StopReason, Option<String>) {
    let _ = shared.stop_new.send_replace(true);
    shared.progress.stage("draining");
    if stop == StopReason::ThresholdExceeded {
        let _ = shared.cancel.send_replace(true);
    }
    let grace = shared.cfg.grace.map(|g| tokio::time::Instant::now() + g);
    loop {
        let again = interrupt.changed();
        let timeout = async {
            match grace {
                Some(g) => tokio::time::sleep_until(g).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            more = tasks.next_done() => if !more { break },
            () = timeout => {
                tracing::warn!("grace period over; cancelling in-flight requests");
                let _ = shared.cancel.send_replace(true);
                tasks.abandon().await;
                break;
            }
            _ = again => {
                if !stop.cancelled() {
                    stop = StopReason::Interrupted;
                    message = Some("interrupted while draining; in-flight requests were cancelled".into());
                }
                let _ = shared.cancel.send_replace(true);
                tasks.abandon().await;
                break;
            }
        }
    }
    shared.progress.stage("done");
    shared.live_run.sessions_over();
    (stop, message)
}
