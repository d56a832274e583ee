//! A stream's requests: each runs as a task of its own ([`guarded`]), builds its body from the
//! stream's conversation, sends it through the replay's transport, records it, and builds the
//! stream's next conversation while its delay runs. A task that panics still yields its record
//! (failed, with the panic as its cause) and its return, so the stream ends and its tree drains.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::TreeRef;
use crate::{bust, request, timer, Session, Shared};
use agentx_dataset::{AssistantMode, Conversation, Trajectory};
use agentx_record::Phase;

/// Where the replay is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    Primers,
    Pressure,
    Profiling,
}

impl Stage {
    pub(super) fn phase(self) -> Phase {
        match self {
            Stage::Primers | Stage::Pressure => Phase::Warmup,
            Stage::Profiling => Phase::Profiling,
        }
    }
}

/// A request's return, as the scheduler sees it.
pub(super) struct Done {
    pub(super) lane: u32,
    pub(super) gen: u64,
    pub(super) stream: u32,
    pub(super) turn: u32,
    pub(super) stage: Stage,
    pub(super) overflow: bool,
    pub(super) failed: Option<String>,
    pub(super) end: Instant,
    /// The conversation at the stream's next turn (none after the last turn or when it could not
    /// be built).
    pub(super) next: Option<Box<Conversation>>,
    pub(super) session: Session,
}

/// One request of a stream, as its task takes it.
pub(super) struct Job {
    pub(super) lane: u32,
    pub(super) gen: u64,
    pub(super) stream: u32,
    pub(super) turn: u32,
    pub(super) stage: Stage,
    pub(super) intended: u64,
    pub(super) max_tokens: u32,
    pub(super) prefix: (u32, u32),
    pub(super) source_idx: (Option<u32>, Option<u32>),
    pub(super) num_turns: u32,
    /// The stream's tree (its conversation id and trajectory).
    pub(super) tree: TreeRef,
    /// The conversation at `turn`, when it was built beforehand.
    pub(super) conv: Option<Box<Conversation>>,
    pub(super) session: Session,
}

/// A stream's conversation from `turn` on: the recorded history up to it (live replies replace
/// the recorded text only from the stream's first live reply on, see
/// [`Conversation::with_recorded_history`]).
fn tree_conversation(
    sh: &Shared,
    traj: Trajectory<'_>,
    turn: u32,
) -> Result<Conversation, agentx_dataset::PromptError> {
    crate::request::conversation(sh, traj, turn as usize).map(Conversation::with_recorded_history)
}

/// Runs a job's request. A panic in it becomes a failed record with the panic as its cause, and
/// the stream ends: its tree drains and every count it held is released.
pub(super) async fn guarded(sh: Arc<Shared>, job: Job) -> Done {
    let spare = job.session.clone();
    let who = (job.lane, job.gen, job.stream, job.turn, job.stage);
    let tree = job.tree.clone();
    let conv_id = tree.stream_id(job.stream);
    let (num_turns, max_tokens, intended) = (job.num_turns, job.max_tokens, job.intended);
    let (prefix, source_idx) = (job.prefix, job.source_idx);
    let recorded = AtomicBool::new(false);
    let fut = request(sh.clone(), job, &recorded);
    tokio::pin!(fut);
    match (CatchPanic { fut: fut.as_mut() }).await {
        Ok(d) => d,
        Err(cause) => {
            let cause = format!("the request task panicked: {cause}");
            tracing::error!("{cause}; stream {conv_id} ends here");
            if !recorded.load(Ordering::Relaxed) {
                let mut rec = request::failed_record(
                    &sh,
                    &spare,
                    request::FailedRequest {
                        trace_id: conv_id,
                        turn: who.3,
                        num_turns,
                        max_tokens,
                        phase: who.4.phase(),
                        intended,
                        kind: "panic",
                        message: cause.clone(),
                    },
                );
                if let Some(info) = rec.tree.as_mut() {
                    (info.prefix_hit_blocks, info.prefix_total_blocks) = prefix;
                    (info.source_outer_idx, info.source_inner_idx) = source_idx;
                }
                request::account(&sh, &rec);
                sh.records.send(rec);
            }
            sh.client.end_session(&spare.correlation_id);
            Done {
                lane: who.0,
                gen: who.1,
                stream: who.2,
                turn: who.3,
                stage: who.4,
                overflow: false,
                failed: Some(cause),
                end: timer::now(),
                next: None,
                session: spare,
            }
        }
    }
}

/// Sends a job's request and builds the stream's next conversation while its delay runs. Sets
/// `recorded` once the request's record went out.
async fn request(sh: Arc<Shared>, job: Job, recorded: &AtomicBool) -> Done {
    let Job {
        lane,
        gen,
        stream: s,
        turn,
        stage,
        intended,
        max_tokens,
        prefix,
        source_idx,
        num_turns,
        tree,
        conv,
        session,
    } = job;
    let conv_id = tree.stream_id(s);
    let conv = match conv {
        Some(c) => Ok(*c),
        None => tree_conversation(&sh, tree.stream_trajectory(s), turn),
    };
    let mut conv = match conv {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{e}; stream {conv_id} ends here");
            return Done {
                lane,
                gen,
                stream: s,
                turn,
                stage,
                overflow: false,
                failed: Some(e.to_string()),
                end: timer::now(),
                next: None,
                session,
            };
        }
    };
    let req = {
        let bust = bust(sh.cfg.placement, &session.marker);
        let last = turn + 1 >= num_turns;
        let (body, template_parts) =
            request::body_of(&sh, &session, max_tokens, (&conv, bust), last);
        let request_id = request::next_request_id(&sh);
        request::Prepared {
            body,
            prompt_blocks: request::prompt_blocks_marked(&sh, &session, &conv, &request_id, true),
            request_id,
            trace_id: conv_id,
            turn,
            num_turns,
            max_tokens,
            client_isl: conv.prompt_words() + sh.counter.count(&session.marker),
            prefix,
            source_idx,
            template_parts,
        }
    };
    #[cfg(debug_assertions)]
    debug_fault(s, stage);
    let phase = stage.phase();
    let mut cancel = sh.cancel.subscribe();
    let sent = request::send_turn(&sh, &session, req, phase, intended, &mut cancel).await;
    recorded.store(true, Ordering::Relaxed);
    let last = turn + 1 >= num_turns;
    if last || sent.overflow {
        sh.client.end_session(&session.correlation_id);
    }
    // The next turn's conversation is built now, while its delay runs.
    let next = if last || sent.overflow {
        None
    } else if stage == Stage::Primers {
        // The primer's chains carry over: the next turn hashes only what its prompt adds, not the
        // whole prompt, and holds it through the rest of the warmup.
        tree_conversation(&sh, tree.stream_trajectory(s), turn + 1)
            .ok()
            .map(|next| {
                next.adopt_chains(&conv);
                Box::new(next)
            })
    } else {
        let reply = match sh.cfg.mode {
            AssistantMode::Live => sent.reply.as_deref(),
            AssistantMode::Recorded => None,
        };
        if let Some(reasoning) = &sent.reasoning {
            conv.keep_reasoning(reasoning);
        }
        match conv.advance(reply) {
            Ok(_) => Some(Box::new(conv)),
            Err(e) => {
                tracing::error!("{e}; stream {conv_id} ends here");
                None
            }
        }
    };
    Done {
        lane,
        gen,
        stream: s,
        turn,
        stage,
        overflow: sent.overflow,
        failed: sent.error,
        end: sent.end,
        next: next.inspect(|c| {
            // Live: writes and caches the history's JSON, the costly part of a body (recorded
            // histories are written whole at send time and not kept, so there is nothing to do
            // ahead); and hashes its new messages into the prompt chain (registered only when it
            // is sent).
            let marker = bust(sh.cfg.placement, &session.marker);
            if sh.cfg.mode == AssistantMode::Live {
                let _ = c.messages_json_parts(marker);
            }
            if let Some(registry) = &sh.prefix {
                c.with_prompt_chain(marker, registry.block_size, |_, _| ());
                c.with_masked_prompt_chain(marker, registry.block_size, |_, _, _| ());
            }
        }),
        session,
    }
}

/// Debug builds only: `AGENTX_TEST_PANIC=N` makes the task of the N-th profiling request of a root
/// stream (counted from 1) panic, so tests can see what the scheduler does with a panicked task.
#[cfg(debug_assertions)]
fn debug_fault(stream: u32, stage: Stage) {
    use std::sync::atomic::AtomicU64;
    use std::sync::OnceLock;
    static AT: OnceLock<Option<u64>> = OnceLock::new();
    static SEEN: AtomicU64 = AtomicU64::new(0);
    let at = AT.get_or_init(|| {
        std::env::var("AGENTX_TEST_PANIC")
            .ok()
            .and_then(|v| v.parse().ok())
    });
    if let Some(n) = *at {
        assert!(
            !(stream == 0
                && stage == Stage::Profiling
                && SEEN.fetch_add(1, Ordering::Relaxed) + 1 == n),
            "AGENTX_TEST_PANIC: root profiling request {n}"
        );
    }
}

/// A future that turns a panic while polling `fut` into `Err` with the panic's message.
struct CatchPanic<'a, F> {
    fut: std::pin::Pin<&'a mut F>,
}

impl<F: std::future::Future> std::future::Future for CatchPanic<'_, F> {
    type Output = Result<F::Output, String>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let fut = self.fut.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(std::task::Poll::Ready(v)) => std::task::Poll::Ready(Ok(v)),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(p) => std::task::Poll::Ready(Err(panic_message(p.as_ref()))),
        }
    }
}

/// The text of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}
