//! One simulated engine: its admission queue, prefix cache, prefill lane and metrics.
//!
//! Invariants: a request holds a [`Running`] guard from admission until its response body is
//! finished or dropped, and the guard alone undoes what admission did (the running gauge, the KV
//! tokens, the `max_num_seqs` permit), so a client that disconnects at any point leaves the
//! engine's counts exact. Prefills of one engine are serialised through `prefill_free_at`, the
//! way one GPU computes one prefill batch at a time; decode steps are per request and only read
//! the running count. Admission looks the prompt up in the engine's cache and, under the same
//! lock, numbers it in the server-wide admission order and says why each missed token missed
//! ([`BlockIndex`]). An engine with a simulated GPU ([`PowerMeter`]) tells its meter of every
//! change of the running count, where the count changes.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::cache::{Admitted, BlockIndex, MissTruth, PrefixCache};
use super::config::{Eviction, SimConfig, Timing};
use super::gpu::PowerMeter;
use super::metrics::EngineMetrics;

/// The mutable scheduling state behind one lock.
#[derive(Debug)]
struct State {
    cache: PrefixCache,
    /// When the engine's prefill lane is next free.
    prefill_free_at: Option<Instant>,
}

/// One data-parallel engine.
#[derive(Debug)]
pub(crate) struct Engine {
    seqs: Arc<Semaphore>,
    state: Mutex<State>,
    /// Signalled whenever a running request releases its KV tokens.
    kv_freed: Notify,
    /// The KV tokens running requests may hold before admission waits (and decode preempts).
    kv_capacity: u64,
    /// Every engine's blocks and the admission counter, shared by the server's engines.
    index: Arc<BlockIndex>,
    pub metrics: EngineMetrics,
    /// The engine's simulated GPU ([`SimConfig::gpu`]).
    pub(crate) gpu: Option<PowerMeter>,
}

/// What admission decided for a request.
#[derive(Debug)]
pub(crate) struct Admission {
    pub running: Running,
    pub cached_tokens: u64,
    /// The request's place in the server-wide admission order (from 1).
    pub admit_seq: u64,
    /// Why its uncached prompt tokens missed.
    pub miss: MissTruth,
    /// Modelled compute time of the prefill (0 with `Timing::Instant`).
    pub prefill: Duration,
    /// Time spent waiting for a sequence slot and KV space.
    pub queued: Duration,
    /// When the first token is due; `None` means at once.
    pub(crate) first_token_at: Option<Instant>,
}

/// Held while a request runs; dropping it releases the request's slot and KV tokens.
#[derive(Debug)]
pub(crate) struct Running {
    pub engine: Arc<Engine>,
    _permit: Option<OwnedSemaphorePermit>,
    kv_tokens: u64,
}

impl Running {
    /// Account `tokens` more KV tokens (generated tokens) to this request.
    #[inline]
    pub(crate) fn add_kv(&mut self, tokens: u64) {
        self.kv_tokens += tokens;
        self.engine.metrics.kv_tokens.fetch_add(tokens, Relaxed);
    }

    /// Whether the engine's KV tokens exceed its capacity (a decode step would need preemption).
    pub(crate) fn kv_over_capacity(&self) -> bool {
        self.engine.metrics.kv_tokens.load(Relaxed) > self.engine.kv_capacity
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let metrics = &self.engine.metrics;
        metrics.running.fetch_sub(1, Relaxed);
        if let Some(gpu) = &self.engine.gpu {
            gpu.release(std::time::Instant::now());
        }
        metrics.kv_tokens.fetch_sub(self.kv_tokens, Relaxed);
        self.engine.kv_freed.notify_waiters();
    }
}

/// Counts a request in `num_requests_waiting` for as long as it lives.
struct Waiting<'a>(&'a EngineMetrics);

impl<'a> Waiting<'a> {
    fn new(metrics: &'a EngineMetrics) -> Self {
        metrics.waiting.fetch_add(1, Relaxed);
        Waiting(metrics)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Relaxed);
    }
}

impl Engine {
    /// A fresh engine for `config`, sharing the server's block index.
    pub(crate) fn new(config: &SimConfig, index: Arc<BlockIndex>) -> Engine {
        let kv_capacity = match config.eviction {
            Eviction::TailFirst => config.cache_capacity_tokens,
            Eviction::Lru => config
                .cache_capacity_tokens
                .max(u64::from(config.max_num_seqs).saturating_mul(config.max_model_len)),
        };
        Engine {
            seqs: Arc::new(Semaphore::new(config.max_num_seqs as usize)),
            state: Mutex::new(State {
                cache: PrefixCache::new(config.block_size, config.cache_capacity_tokens),
                prefill_free_at: None,
            }),
            kv_freed: Notify::new(),
            kv_capacity,
            index,
            metrics: EngineMetrics::new(config.max_model_len),
            gpu: config
                .gpu
                .map(|model| PowerMeter::new(&model, std::time::Instant::now())),
        }
    }

    /// Queue the request until it may run, then look up its prefix and plan its prefill.
    ///
    /// `blocks` are the prompt's chained block hashes, `arrival` when the request arrived.
    pub(crate) async fn admit(
        self: &Arc<Self>,
        timing: &Timing,
        prompt_tokens: u64,
        blocks: &[u64],
        arrival: Instant,
    ) -> Admission {
        let metrics = &self.metrics;
        let permit = match timing {
            // Fixed timing promises no queueing effects at all.
            Timing::Fixed { .. } => None,
            _ => {
                let waiting = Waiting::new(metrics);
                // The semaphore is never closed, so acquisition only fails if it were.
                let permit = self.seqs.clone().acquire_owned().await.ok();
                if matches!(timing, Timing::Modeled(_)) {
                    // Like vLLM's scheduler, a request waits until its prompt fits in the KV cache,
                    // unless nothing else runs (then it runs and may be preempted).
                    loop {
                        let freed = self.kv_freed.notified();
                        tokio::pin!(freed);
                        freed.as_mut().enable();
                        let used = metrics.kv_tokens.load(Relaxed);
                        if used + prompt_tokens <= self.kv_capacity
                            || metrics.running.load(Relaxed) == 0
                        {
                            break;
                        }
                        freed.await;
                    }
                }
                drop(waiting);
                permit
            }
        };
        metrics.running.fetch_add(1, Relaxed);
        if let Some(gpu) = &self.gpu {
            gpu.admit(std::time::Instant::now());
        }
        metrics.kv_tokens.fetch_add(prompt_tokens, Relaxed);
        let running = Running {
            engine: self.clone(),
            _permit: permit,
            kv_tokens: prompt_tokens,
        };

        let now = Instant::now();
        let queued = now.saturating_duration_since(arrival);
        let (cached_tokens, admit_seq, miss, prefill, first_token_at) = {
            let mut state = self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (cached, admit_seq, miss) = self.look_up(&mut state.cache, blocks, prompt_tokens);
            let uncached = prompt_tokens - cached;
            let (prefill, first_token_at) = match timing {
                Timing::Instant => (Duration::ZERO, None),
                // Counted from arrival, as a server's TTFT is: reading and parsing a large body
                // does not add to it (unless it takes longer than the TTFT itself).
                Timing::Fixed { ttft, .. } => (*ttft, Some((arrival + *ttft).max(now))),
                Timing::Modeled(mt) => {
                    let prefill = mt.prefill(uncached);
                    let start = state.prefill_free_at.map_or(now, |t| t.max(now));
                    let end = start + prefill;
                    state.prefill_free_at = Some(end);
                    (prefill, Some(end))
                }
            };
            (cached, admit_seq, miss, prefill, first_token_at)
        };

        metrics.prompt_tokens.fetch_add(prompt_tokens, Relaxed);
        metrics
            .prefix_cache_queries
            .fetch_add(prompt_tokens, Relaxed);
        metrics.prefix_cache_hits.fetch_add(cached_tokens, Relaxed);
        metrics.miss_cold.fetch_add(miss.cold, Relaxed);
        metrics.miss_capacity.fetch_add(miss.capacity, Relaxed);
        metrics.miss_routing.fetch_add(miss.routing, Relaxed);
        metrics.queue.observe_duration(queued);
        metrics.prompt_len.observe_n(prompt_tokens, 1);
        let ttft = first_token_at.map_or(queued, |t| t.saturating_duration_since(arrival));
        metrics.ttft.observe_duration(ttft);

        Admission {
            running,
            cached_tokens,
            admit_seq,
            miss,
            prefill,
            queued,
            first_token_at,
        }
    }

    /// Looks the prompt up in `cache` (this engine's, locked) and caches it: the cached tokens, the
    /// admission's sequence number and why the rest missed. Updates the eviction count.
    fn look_up(
        &self,
        cache: &mut PrefixCache,
        blocks: &[u64],
        prompt_tokens: u64,
    ) -> (u64, u64, MissTruth) {
        let usable = cache.usable_blocks(prompt_tokens).min(blocks.len());
        let held_before: Vec<bool> = blocks[..usable]
            .iter()
            .map(|hash| cache.contains(*hash))
            .collect();
        let lookup = cache.lookup(blocks, prompt_tokens);
        let (admit_seq, miss) = self.index.admit(&Admitted {
            blocks,
            prompt_tokens,
            usable,
            held_before: &held_before,
            lookup: &lookup,
            block_size: cache.block_size(),
        });
        self.metrics
            .evicted_blocks
            .store(cache.evicted_total(), Relaxed);
        let cached = lookup.hit_blocks as u64 * u64::from(cache.block_size());
        (cached, admit_seq, miss)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_eviction_takes_admission_off_the_cache_size() {
        let mut config = SimConfig::h200();
        config.cache_capacity_tokens = 4096;
        let index = Arc::new(BlockIndex::default());
        let tail_first = Engine::new(&config, index.clone());
        assert_eq!(
            tail_first.kv_capacity, 4096,
            "today: the cache bounds admission"
        );
        config.eviction = Eviction::Lru;
        let lru = Engine::new(&config, index.clone());
        assert_eq!(
            lru.kv_capacity,
            256 * 131_072,
            "max_num_seqs × max_model_len"
        );
        config.cache_capacity_tokens = u64::MAX;
        assert_eq!(
            Engine::new(&config, index).kv_capacity,
            u64::MAX,
            "a larger cache still counts"
        );
    }
}
