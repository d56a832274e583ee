//! Request preparation off the reactor: the threads that log, parse, count and hash a request's
//! body, at a lower scheduling priority than the runtime that reads the connections.
//!
//! A prompt of tens of thousands of tokens takes milliseconds to parse and hash. Done on the
//! runtime's worker, every other connection waits that long to be read: a body larger than the
//! socket's receive buffer cannot all arrive meanwhile, so its last byte (where the client's part
//! of a time to first token ends, [`crate::rx_stamp`]) arrives late, and a first token due meanwhile
//! goes out late. A real engine's API server hands tokenization to other processes for the same
//! reason.
//!
//! [`Preparer`] keeps one thread per core the process may run on (its affinity mask), started with
//! its first job. On Linux each raises its own nice value by [`PREP_NICE`], so the scheduler lets a
//! woken reactor run first on a shared core. A nice thread gets a small share of a core the reactor
//! keeps busy, so one more thread at the process's own priority takes any job that has waited
//! [`BACKLOG_WAIT`]: when the server is saturated, preparation runs as it would on the reactor
//! (a fair share), not behind it. Jobs are taken in the order they were handed over.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// How much nicer a preparation thread is than the process: at nice 10 its weight is 110 against a
/// normal thread's 1,024.
pub(crate) const PREP_NICE: i32 = 10;

/// A job that has waited this long is taken by the thread at the process's own priority.
pub(crate) const BACKLOG_WAIT: Duration = Duration::from_millis(2);

/// Bodies at most this long are prepared on the reactor that read them: the hand-over to another
/// thread and back costs more than parsing them.
pub(crate) const PREPARE_INLINE_BYTES: usize = 16 << 10;

/// The name of the thread that takes jobs which have waited [`BACKLOG_WAIT`].
const BACKLOG_THREAD: &str = "agentx-sim-prep-backlog";

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A job and when it was handed over.
struct Queued {
    since: Instant,
    job: Job,
}

/// The jobs not yet taken, and whether the server has gone.
#[derive(Default)]
struct Waiting {
    jobs: VecDeque<Queued>,
    closed: bool,
}

/// What the preparation threads share: the waiting jobs and the signal of a new one.
#[derive(Default)]
struct Queue {
    waiting: Mutex<Waiting>,
    handed_over: Condvar,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        // A job runs outside the lock, so a poisoned lock held only queue operations: still whole.
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The preparation threads of one server, started with the first job; they end when it is dropped.
#[derive(Default)]
pub(crate) struct Preparer {
    queue: OnceLock<Option<Arc<Queue>>>,
}

impl Preparer {
    /// Runs `prepare` on a preparation thread and waits for its result. Where no thread could be
    /// started (the process is out of threads), it runs on the caller instead.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        prepare: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, PrepLost> {
        let Some(queue) = self.queue.get_or_init(start_threads) else {
            return Ok(prepare());
        };
        let (done_tx, done_rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            // The caller may have gone (its connection closed): then the result is dropped.
            let _ = done_tx.send(prepare());
        });
        let since = Instant::now();
        queue.lock().jobs.push_back(Queued { since, job });
        queue.handed_over.notify_all();
        done_rx.await.map_err(|_| PrepLost)
    }
}

impl Drop for Preparer {
    fn drop(&mut self) {
        if let Some(Some(queue)) = self.queue.get() {
            queue.lock().closed = true;
            queue.handed_over.notify_all();
        }
    }
}

/// A preparation thread ended before answering (the job panicked, or the server is shutting down).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PrepLost;

/// Starts one nice preparation thread per core this process may run on, and the backlog thread;
/// `None` if none could start.
fn start_threads() -> Option<Arc<Queue>> {
    let queue = Arc::new(Queue::default());
    let cores = thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let names = (0..cores).map(|ix| format!("agentx-sim-prep-{ix}"));
    let started = names
        .chain([BACKLOG_THREAD.to_string()])
        .filter(|name| {
            let queue = Arc::clone(&queue);
            let backlog = name == BACKLOG_THREAD;
            let spawned = thread::Builder::new().name(name.clone()).spawn(move || {
                if !backlog {
                    lower_priority();
                }
                work(&queue, backlog);
            });
            spawned.is_ok()
        })
        .count();
    if started == 0 {
        tracing::warn!("no request-preparation thread could start: preparing on the reactor");
        return None;
    }
    Some(queue)
}

/// A preparation thread: runs jobs until the server is dropped; the backlog thread only those that
/// have waited [`BACKLOG_WAIT`]. A job that panics is lost (its caller hears [`PrepLost`]); the
/// thread goes on with the next.
fn work(queue: &Queue, backlog: bool) {
    while let Some(job) = take(queue, backlog) {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
            tracing::error!("a request-preparation job panicked; its request is dropped");
        }
    }
}

/// The next job this thread may take, waiting for one; `None` once the server has gone.
fn take(queue: &Queue, backlog: bool) -> Option<Job> {
    let mut waiting = queue.lock();
    loop {
        if waiting.closed {
            return None;
        }
        let wait = match waiting.jobs.front() {
            None => None,
            Some(_) if !backlog => break,
            Some(oldest) => match BACKLOG_WAIT.checked_sub(oldest.since.elapsed()) {
                Some(left) if !left.is_zero() => Some(left),
                _ => break,
            },
        };
        waiting = match wait {
            None => (queue.handed_over.wait(waiting)).unwrap_or_else(PoisonError::into_inner),
            Some(left) => match queue.handed_over.wait_timeout(waiting, left) {
                Ok((waiting, _)) => waiting,
                Err(e) => e.into_inner().0,
            },
        };
    }
    waiting.jobs.pop_front().map(|queued| queued.job)
}

/// Raises the calling thread's nice value by [`PREP_NICE`].
fn lower_priority() {
    if let Err(e) = agentx_record::priority::lower_current_thread(PREP_NICE) {
        tracing::debug!("a request-preparation thread keeps its priority: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn jobs_run_off_the_caller_and_answer_in_turn() {
        let preparer = Preparer::default();
        let caller = thread::current().id();
        for n in 0..20u64 {
            let (square, ran_on) = preparer
                .run(move || (n * n, thread::current().id()))
                .await
                .expect("a preparation thread answers");
            assert_eq!(square, n * n);
            assert_ne!(ran_on, caller, "job {n} ran on the reactor");
        }
    }

    /// Every job runs at its thread's priority: nicer than the caller on a preparation thread, the
    /// caller's own on the backlog thread, which takes only jobs that have waited.
    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "current_thread")]
    async fn preparation_threads_are_nicer_and_the_backlog_thread_takes_only_waiting_jobs() {
        use rustix::process::getpriority_process;
        let caller = getpriority_process(None).expect("the caller's nice value");
        let preparer = Preparer::default();
        for _ in 0..20 {
            let sent = Instant::now();
            let (waited, name, nice) = preparer
                .run(move || {
                    let name = thread::current().name().map(str::to_string);
                    (sent.elapsed(), name, getpriority_process(None).ok())
                })
                .await
                .expect("a preparation thread answers");
            if name.as_deref() == Some(BACKLOG_THREAD) {
                assert_eq!(nice, Some(caller));
                assert!(waited >= BACKLOG_WAIT, "taken after {waited:?}");
            } else {
                assert_eq!(nice, Some((caller + PREP_NICE).min(19)), "on {name:?}");
            }
        }
    }

    /// With as many jobs busy as there are nice threads, a job is still prepared: by the backlog
    /// thread when the busy jobs hold every nice thread.
    #[tokio::test(flavor = "current_thread")]
    async fn a_job_behind_busy_preparation_threads_is_taken_by_the_backlog_thread() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let preparer = Arc::new(Preparer::default());
        let cores = thread::available_parallelism().map_or(1, std::num::NonZero::get);
        // The busy jobs wait at the barrier until the test joins it, after the probe answered.
        let gate = Arc::new(std::sync::Barrier::new(cores + 1));
        let started = Arc::new(AtomicUsize::new(0));
        let blocked: Vec<_> = (0..cores)
            .map(|_| {
                let (preparer, gate, started) = (preparer.clone(), gate.clone(), started.clone());
                tokio::spawn(async move {
                    let job = move || {
                        started.fetch_add(1, Ordering::SeqCst);
                        gate.wait();
                    };
                    preparer.run(job).await
                })
            })
            .collect();
        while started.load(Ordering::SeqCst) < cores {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let probe = preparer.run(|| 42u32);
        let answered = tokio::time::timeout(Duration::from_secs(30), probe).await;
        assert_eq!(answered.ok(), Some(Ok(42)), "a free thread took the job");
        tokio::task::spawn_blocking(move || gate.wait())
            .await
            .unwrap();
        for job in blocked {
            assert_eq!(job.await.ok(), Some(Ok(())));
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_panicking_job_is_reported_and_the_others_still_run() {
        let preparer = Preparer::default();
        let lost = preparer.run(|| -> u32 { panic!("a bad job") }).await;
        assert_eq!(lost, Err(PrepLost));
        for n in 0..4u32 {
            assert_eq!(preparer.run(move || n + 1).await, Ok(n + 1));
        }
    }
}
