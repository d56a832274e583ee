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
