//! A shard's warmup hand-off in a sharded run: this shard's warmup outcome goes to the others
//! through the rendezvous ([`super::ShardLink`]), and profiling begins only when every shard's
//! warmup returned. The single-stream replay and the session-tree scheduler both hand off here.

use tokio::sync::{mpsc, oneshot, watch};

use super::{ReplayOutcome, Shared, StopReason};

/// How a shard's warmup ended, as the hand-off to the other shards reads it (an interrupt while
/// waiting for them is noted in `interrupted`).
pub(super) struct WarmEnd<'a> {
    pub(super) interrupted: &'a mut bool,
    pub(super) failures: &'a [String],
    /// A session-tree shard's hand-off offset after the cache-pressure stage; set to the smallest
    /// of all shards' when profiling may begin.
    pub(super) t0_ms: &'a mut Option<f64>,
}

/// A sharded run's warmup hand-off: sends this shard's warmup outcome and waits for every shard's.
/// `Some` when another shard's warmup failed (every shard stops).
pub(super) async fn shard_warmup(
    shared: &Shared,
    warm: WarmEnd<'_>,
    done: oneshot::Sender<Result<Option<f64>, String>>,
    profile: oneshot::Receiver<Result<Option<f64>, String>>,
    local_stop: Option<&mpsc::UnboundedSender<(StopReason, String)>>,
    stride: (u64, u64),
    interrupt: &mut watch::Receiver<u32>,
) -> Option<ReplayOutcome> {
    let mine = if *warm.interrupted {
        Err(format!("shard {} was interrupted during warmup", stride.0))
    } else if !warm.failures.is_empty() {
        Err(format!(
            "shard {} warmup failed: {}",
            stride.0,
            warm.failures.join("; ")
        ))
    } else {
        Ok(*warm.t0_ms)
    };
    let failed_here = mine.is_err();
    let _ = done.send(mine);
    if failed_here {
        return None;
    }
    tracing::info!("warmup returned; waiting for every shard's warmup");
    let verdict = tokio::select! {
        v = profile => v.unwrap_or_else(|_| Err("the rendezvous closed before profiling began".into())),
        _ = interrupt.changed() => {
            *warm.interrupted = true;
            if let Some(tx) = local_stop {
                let _ = tx.send((StopReason::Interrupted, format!("shard {} was interrupted", stride.0)));
            }
            Ok(None)
        }
    };
    let why = match verdict {
        Ok(t0) => {
            if t0.is_some() {
                *warm.t0_ms = t0;
            }
            return None;
        }
        Err(why) => why,
    };
    shared.progress.finish();
    Some(ReplayOutcome {
        stop: StopReason::WarmupFailed,
        tally: shared.tally.lock().expect("tally lock").clone(),
        profiling_ns: None,
        message: Some(format!(
            "another shard's warmup did not succeed, so every shard stopped: {why}"
        )),
    })
}

/// An interrupt of this process during profiling: the stop and its message, and word of it to the
/// other shards of a sharded run.
pub(super) fn interrupted(
    local: Option<&mpsc::UnboundedSender<(StopReason, String)>>,
    shard: u64,
) -> (StopReason, Option<String>) {
    if let Some(tx) = local {
        let _ = tx.send((
            StopReason::Interrupted,
            format!("shard {shard} was interrupted"),
        ));
    }
    (
        StopReason::Interrupted,
        Some("interrupted: no new turns were started and in-flight requests were drained".into()),
    )
}

/// Another shard's stop, once it comes (never outside a sharded run).
pub(super) async fn other_shard(
    remote: &mut Option<&mut watch::Receiver<Option<(StopReason, String)>>>,
) -> Option<(StopReason, String)> {
    once_set(remote).await
}

/// The value a watch is set to, once it is; pending forever without a watch.
pub(super) async fn once_set<T: Clone>(
    watched: &mut Option<&mut watch::Receiver<Option<T>>>,
) -> Option<T> {
    match watched {
        Some(rx) => rx
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|v| v.clone()),
        None => std::future::pending().await,
    }
}

/// The stop another shard's stop makes here: the threshold cancels in-flight requests, anything
/// else drains them like an interrupt.
pub(super) fn stopped_by(why: StopReason, text: String) -> (StopReason, Option<String>) {
    let stop = match why {
        StopReason::ThresholdExceeded => why,
        _ => StopReason::Interrupted,
    };
    (stop, Some(text))
}
