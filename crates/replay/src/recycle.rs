//! The recycle queue of the profiling phase (docs/specs/replay-rules.md#recycle-queue): a FIFO of
//! every usable trace in dataset order. A finished (or overflowed) trace goes to the tail before
//! the stop check; the next session takes the first trace from the head that is not running on
//! another lane, so every trace is played before any repeats and a trace never runs twice at once
//! while the pool is larger than the lanes.

use std::collections::VecDeque;

/// Queue state; one per run, behind a lock.
#[derive(Debug)]
pub(crate) struct Recycler {
    queue: VecDeque<usize>,
    /// Live sessions per trace index.
    active: Vec<u32>,
    /// Sessions minted per trace index in the profiling phase.
    passes: Vec<u32>,
}

/// A session to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Next {
    pub(crate) trace: usize,
    /// Sessions of this trace minted before this one.
    pub(crate) recycle_pass: u32,
}

impl Recycler {
    /// `pool`: usable trace indices in dataset order; `running`: the traces the lanes start with.
    pub(crate) fn new(
        pool: &[usize],
        running: impl IntoIterator<Item = usize>,
        traces: usize,
    ) -> Self {
        let mut recycler = Recycler {
            queue: pool.iter().copied().collect(),
            active: vec![0; traces],
            passes: vec![0; traces],
        };
        for t in running {
            recycler.active[t] += 1;
            recycler.passes[t] += 1;
        }
        recycler
    }

    /// Ends a session of `finished` and, when `can_start`, picks the next one.
    pub(crate) fn recycle(&mut self, finished: usize, can_start: bool) -> Option<Next> {
        match self.active.get_mut(finished) {
            Some(n) if *n > 0 => *n -= 1,
            _ => tracing::error!(
                trace = finished,
                "a trace was recycled that has no live session (double recycle); ignored"
            ),
        }
        self.queue.push_back(finished);
        if !can_start {
            return None;
        }
        let mut pick = None;
        for _ in 0..self.queue.len() {
            let trace = self.queue.pop_front()?;
            if self.active[trace] == 0 {
                pick = Some(trace);
                break;
            }
            self.queue.push_back(trace);
        }
        // Every trace is live (the pool is not larger than the lanes): take the head anyway.
        let trace = match pick {
            Some(trace) => trace,
            None => self.queue.pop_front()?,
        };
        self.active[trace] += 1;
        let recycle_pass = self.passes[trace];
        self.passes[trace] += 1;
        Some(Next {
            trace,
            recycle_pass,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_plays_every_trace_in_order_and_counts_passes() {
        // Pool 0..5; the lanes start mid-trace on 0 and 1, which are also in the queue.
        let mut r = Recycler::new(&[0, 1, 2, 3, 4], [0, 1], 5);
        let mut next = |t| r.recycle(t, true).map(|n| (n.trace, n.recycle_pass));
        // Trace 0 ends: the head is 0 itself (its full play from turn 0), second pass.
        assert_eq!(next(0), Some((0, 1)));
        assert_eq!(next(1), Some((1, 1)));
        assert_eq!(next(0), Some((2, 0)));
        assert_eq!(next(1), Some((3, 0)));
        assert_eq!(next(2), Some((4, 0)));
        assert_eq!(next(3), Some((0, 2)));
    }

    #[test]
    fn a_live_trace_is_skipped_and_requeued() {
        let mut r = Recycler::new(&[0, 1, 2], [0, 1], 3);
        // Trace 1 ends: head 0 is live on the other lane, so 0 goes back and 1 is next.
        assert_eq!(r.recycle(1, true).map(|n| n.trace), Some(1));
        assert_eq!(r.queue, [2, 1, 0]);
    }

    #[test]
    fn after_the_deadline_nothing_starts_but_the_trace_is_queued() {
        let mut r = Recycler::new(&[0, 1], [0], 2);
        assert_eq!(r.recycle(0, false), None);
        assert_eq!(r.queue, [0, 1, 0]);
    }

    #[test]
    fn a_pool_smaller_than_the_lanes_shares_traces() {
        let mut r = Recycler::new(&[0], [0, 0], 1);
        let n = r.recycle(0, true).unwrap();
        assert_eq!(n.trace, 0);
        assert_eq!(n.recycle_pass, 2);
    }
}
