//! Send-time wake-ups finer than tokio's timer wheel.
//!
//! tokio's `sleep_until` fires on the first millisecond tick at or after its deadline, so a turn due
//! after a think time would go out 0-1 ms late, and that lag would count in its TTFT (latencies count
//! from the intended send). [`Waker`] keeps the deadlines in a heap on one thread of its own, which
//! sleeps on a channel with a timeout to the earliest one (the kernel's high-resolution timers, tens of
//! microseconds late) and completes that lane's oneshot. One wake-up per scheduled turn; lanes that
//! stop waiting simply drop their receiver.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Instant;

use tokio::sync::oneshot;

type Entry = (Instant, oneshot::Sender<()>);

/// The replay's "now": tokio's clock, which is the system's monotonic clock in a run and the
/// paused virtual clock in the replay's tests (`tokio::time::pause`, feature `test-util`).
#[inline]
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// A thread that completes oneshots at their deadlines.
#[derive(Debug)]
pub(crate) struct Waker {
    tx: Mutex<mpsc::Sender<Entry>>,
}

impl Waker {
    /// Starts the timer thread; it ends when the `Waker` is dropped and no deadline is pending.
    pub(crate) fn start() -> std::io::Result<Waker> {
        let (sender, receiver) = mpsc::channel::<Entry>();
        std::thread::Builder::new()
            .name("agentx-timer".into())
            .spawn(move || run(&receiver))?;
        Ok(Waker {
            tx: Mutex::new(sender),
        })
    }

    /// Completes when `at` has passed (at once if it has already).
    pub(crate) async fn sleep_until(&self, at: Instant) {
        if at <= Instant::now() {
            return;
        }
        let (waiter, woken) = oneshot::channel();
        let queued = self
            .tx
            .lock()
            .map(|deadlines| deadlines.send((at, waiter)).is_ok())
            .unwrap_or(false);
        if !queued || woken.await.is_err() {
            // The timer thread is gone: fall back to tokio's timer.
            tokio::time::sleep_until(at.into()).await;
        }
    }
}

fn run(deadlines: &mpsc::Receiver<Entry>) {
    // Deadlines ordered by time, then by arrival (the sequence number), so equal instants pop in order.
    let mut heap: BinaryHeap<Reverse<(Instant, u64)>> = BinaryHeap::new();
    let mut waiting: HashMap<u64, oneshot::Sender<()>> = HashMap::new();
    let mut seq = 0u64;
    let mut closed = false;
    loop {
        let now = Instant::now();
        while let Some(Reverse((deadline, seq_no))) = heap.peek().copied() {
            if deadline > now {
                break;
            }
            heap.pop();
            if let Some(waiter) = waiting.remove(&seq_no) {
                let _ = waiter.send(());
            }
        }
        let next = match heap.peek() {
            Some(Reverse((deadline, _))) => Some(*deadline),
            None if closed => return,
            None => None,
        };
        let got = match next {
            Some(deadline) => {
                match deadlines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok(e) => Some(e),
                    Err(mpsc::RecvTimeoutError::Timeout) => None,
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        closed = true;
                        None
                    }
                }
            }
            None => match deadlines.recv() {
                Ok(e) => Some(e),
                Err(_) => return,
            },
        };
        if let Some((deadline, waiter)) = got {
            seq += 1;
            heap.push(Reverse((deadline, seq)));
            waiting.insert(seq, waiter);
            // Take everything already queued before sleeping again.
            while let Ok((deadline, waiter)) = deadlines.try_recv() {
                seq += 1;
                heap.push(Reverse((deadline, seq)));
                waiting.insert(seq, waiter);
            }
        }
        if closed && heap.is_empty() {
            return;
        }
        if closed {
            // No new deadlines can come: sleep to the next one.
            if let Some(Reverse((deadline, _))) = heap.peek() {
                std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn wakes_at_or_after_each_deadline_in_order() {
        let w = std::sync::Arc::new(Waker::start().unwrap());
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for i in (1..=20u64).rev() {
            let w = w.clone();
            let at = t0 + Duration::from_millis(5 + 2 * i);
            tasks.push(tokio::spawn(async move {
                w.sleep_until(at).await;
                (at, Instant::now())
            }));
        }
        for t in tasks {
            let (at, woke) = t.await.unwrap();
            assert!(woke >= at, "woke {:?} before its deadline", at - woke);
        }
        // A deadline in the past returns at once; a dropped waiter does not stop the others.
        w.sleep_until(t0).await;
        let far = w.sleep_until(Instant::now() + Duration::from_secs(3600));
        assert!(tokio::time::timeout(Duration::from_millis(2), far)
            .await
            .is_err());
        let at = Instant::now() + Duration::from_millis(3);
        w.sleep_until(at).await;
        assert!(Instant::now() >= at);
    }
}
