//! Cache truth ([`CacheReport`]): what prefix-cache hit the run's prompts allowed, and why each
//! missed prompt token missed, from the records alone.
//!
//! The prompts' block chains ([`agentx_record::PromptBlocks`], each block's identity rebuilt by
//! following `from`) are replayed through the cache model ([`crate::kvmodel::Lru`], the eviction
//! code the built-in simulator runs) in the order the server admitted them (the simulator's
//! admission sequence; else send order), every admitted request of every phase feeding the model
//! and the profiling ones counted:
//! - an infinite cache: the hit the prompts allowed at all;
//! - one pool at the server's capacity (every worker's capacity together: routing that never
//!   loses a prefix);
//! - each worker at its capacity, the requests where they ran (the worker each response named):
//!   the model of what happened, whose misses are split by cause. A missed block held by another
//!   worker missed for **routing**; one cached before and evicted everywhere for **capacity**
//!   (with the time since its last use); a block never sent before is **cold**, as are the partial
//!   last block and the last token no hit covers, unless another session had sent it with its own
//!   cache-bust marker: then the marker missed it by design (**bust**; the record's
//!   `shared_unmarked`), or unless the stream's previous request had sent that position and this
//!   prompt rewrote it (**divergence**: a compaction, a rebuilt history). A request the server refused as too long missed
//!   every token for the **context cap**.
//!
//! Against the measurement (each response's cached tokens): where the server hit less than the
//! model, the difference is **unexplained**; where it hit more (a host tier, a larger real
//! capacity), the difference is **surplus**, kept apart and never netted. The definition of hit is
//! one: cached prompt tokens over prompt tokens. A figure the records cannot support is `null`
//! with the reason, never 0. It is a model, not the server's eviction policy: exact against the
//! simulator (the same code, the same order, the same blocks), an estimate elsewhere, where
//! template tokens and a tokenizer stand between the words hashed and the tokens cached (the
//! words are scaled to each response's prompt tokens).

use std::collections::{BTreeMap, HashMap};

use agentx_record::{Phase, RequestRecord};
use serde::{Deserialize, Serialize};

use crate::kvmodel::{BlockHashMap, Lru};

/// What "hit" means in every figure of the report.
pub const HIT_DEFINITION: &str = "cached prompt tokens / prompt tokens";

/// A value and where it came from (a flag, the server's metrics, the simulator, the chains).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Sourced<T> {
    /// The value.
    pub value: T,
    /// Where it came from.
    pub source: String,
}

/// What the model is told about the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    /// Tokens per block of the model; a multiple of the chains' block size, else the chains'.
    pub block_size: Option<Sourced<u32>>,
    /// KV capacity of one worker, in tokens; `None`: no reading (the at-capacity figures are null).
    pub capacity_tokens: Option<Sourced<u64>>,
}

/// A llama.cpp server's slots, from its `GET /props` (`total_slots`, and each slot's context
/// `default_generation_settings.n_ctx`): its KV capacity, which its metrics do not carry. Each
/// slot keeps the tokens of the last prompt it ran; the model pools them (`slots` x the slot's
/// context) as one LRU of that many tokens. The server's host-memory prompt cache (`--cache-ram`)
/// can restore a prompt a slot dropped; the model does not see it, so its hits show as surplus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SlotPool {
    /// Slots (`-np`).
    pub slots: u32,
    /// Tokens of context per slot.
    pub slot_context_tokens: u64,
}

impl SlotPool {
    /// The pool's capacity in tokens, and where it came from.
    pub fn capacity(&self) -> Sourced<u64> {
        Sourced {
            value: u64::from(self.slots) * self.slot_context_tokens,
            source: format!(
                "llama.cpp /props: {} slots x {} tokens",
                self.slots, self.slot_context_tokens
            ),
        }
    }
}

/// The hit the server's own counters give over the profiling window, by tier: the same figures
/// the InferenceX report publishes (`cache.*`), computed by its rule for each engine. `None`
/// fields: the server exports no counter for that tier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CounterHit {
    /// The device (GPU) tier: its hits over its lookups.
    pub device: Option<f64>,
    /// Where `device` came from (the counters and the formula).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_source: Option<String>,
    /// The host (CPU) tier, where the engine splits it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<f64>,
    /// The external (offload, LMCache) tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<f64>,
    /// Every tier together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overall: Option<f64>,
}

/// A rate, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Rate {
    /// The share (0 to 1); `null` when the records cannot support it.
    pub value: Option<f64>,
    /// Why `value` is null.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub null_reason: Option<String>,
}

impl Rate {
    fn of(part: u64, whole: u64) -> Rate {
        if whole == 0 {
            return Rate::none("no prompt tokens");
        }
        Rate {
            value: Some(part as f64 / whole as f64),
            null_reason: None,
        }
    }

    fn none(reason: &str) -> Rate {
        Rate {
            value: None,
            null_reason: Some(reason.to_owned()),
        }
    }
}

/// The hit the prompts allowed, by model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Achievable {
    /// An infinite cache shared by every worker.
    pub infinite: Rate,
    /// One pool of every worker's capacity together.
    pub pooled_at_capacity: Rate,
    /// Each worker at its capacity, the requests where they ran (the attribution's model).
    pub per_worker_as_routed: Rate,
}

/// Missed prompt tokens by cause (the model's), and against the measurement.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MissTokens {
    /// Never sent before, plus each prompt's partial last block and last token.
    pub cold: u64,
    /// Cache-bust by design: never sent before with this marker, but sent by another session
    /// with its own (the scenario's marker kept it from hitting).
    #[serde(default)]
    pub bust: u64,
    /// The history diverged: the session's previous request had sent this position, and this
    /// prompt rewrote it (a compaction, a history rebuilt or rendered differently), from where the
    /// two part up to the previous prompt's length.
    #[serde(default)]
    pub divergence: u64,
    /// Cached once, evicted for capacity everywhere.
    pub capacity: u64,
    /// Cached on another worker than the one the request ran on.
    pub routing: u64,
    /// The server refused the request as longer than its context.
    pub context_cap: u64,
    /// The server hit less than the model predicts; `null` without cached-token figures.
    pub unexplained: Option<u64>,
    /// The server hit more than the model predicts (a host tier, a larger capacity); `null`
    /// without cached-token figures.
    pub surplus: Option<u64>,
}

/// The server's own split of its misses (the simulator's `x-sim-miss-*`), beside the model's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerMissSplit {
    /// Never cached anywhere, plus the partial last blocks and last tokens.
    pub cold: u64,
    /// Evicted for capacity.
    pub capacity: u64,
    /// Held by another worker.
    pub routing: u64,
}

/// One turn index's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TurnRow {
    /// The turn index (0 is a stream's first turn).
    pub turn: u32,
    /// Profiling requests at this turn.
    pub requests: u64,
    /// Their prompt tokens.
    pub prompt_tokens: u64,
    /// The measured hit.
    pub measured: Rate,
    /// The per-worker model's hit.
    pub achievable: Rate,
    /// Their missed tokens by cause.
    pub miss: MissTokens,
}

/// One session's figures (a session tree counts as one session: its root stream's id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionRow {
    /// The session's root correlation id.
    pub session: String,
    /// The trace it replays.
    pub trace_id: String,
    /// Profiling requests of the session.
    pub requests: u64,
    /// Their prompt tokens.
    pub prompt_tokens: u64,
    /// The measured hit.
    pub measured: Rate,
    /// The per-worker model's hit.
    pub achievable: Rate,
    /// Their missed tokens by cause.
    pub miss: MissTokens,
}

/// The run's cache truth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CacheReport {
    /// What a hit is ([`HIT_DEFINITION`]).
    pub definition: String,
    /// Words per block of the prompt chains the client hashed.
    pub chain_block_size: u32,
    /// Tokens per block of the model, and where that came from.
    pub block_size: Sourced<u32>,
    /// One worker's KV capacity in tokens, and where it came from; `null` without a reading.
    pub capacity_tokens: Option<Sourced<u64>>,
    /// Workers the model holds a cache for: those the responses named, else 1 (one pool).
    pub workers: u64,
    /// `measured` (each response named its worker) or `one pool` (they did not).
    pub routing: String,
    /// Profiling requests counted (with a chain, admitted or refused as too long).
    pub requests: u64,
    /// Their prompt tokens (the server's count where it gave one).
    pub prompt_tokens: u64,
    /// The hit the responses reported (their cached tokens).
    pub measured: Rate,
    /// The hit the server's counters give over the profiling window; absent without a scrape log
    /// or a hit counter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_counters: Option<CounterHit>,
    /// The hit the prompts allowed.
    pub achievable: Achievable,
    /// The missed tokens by cause.
    pub miss: MissTokens,
    /// The server's own split, where every response gave one (the simulator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_split: Option<ServerMissSplit>,
    /// Blocks the per-worker model evicted for capacity over the whole run (every phase): the
    /// simulator's `agentx_sim:kv_evicted_blocks_total` when the model is exact.
    pub evicted_blocks: u64,
    /// Median time from a block's last use to its capacity miss, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_gap_median_ms: Option<f64>,
    /// The figures by turn index.
    pub by_turn: Vec<TurnRow>,
    /// The figures by session, in the order the server admitted each one's first profiling
    /// request (a refused one's last).
    #[serde(default)]
    pub by_session: Vec<SessionRow>,
    /// What the reader should know (a block size that could not be used, missing figures).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// What the server's metrics say of its KV cache: its block size and one worker's capacity in
/// tokens, from the last scrape of the first endpoint that reports them (vLLM's
/// `cache_config_info` `num_gpu_blocks` x `block_size`; SGLang's `max_total_num_tokens`;
/// TensorRT-LLM's `kv_cache_max_blocks` x `kv_cache_tokens_per_block`). A reading that differs
/// across workers or scrapes (a restart) is noted, and the largest kept.
pub fn server_reading(log: &crate::scrape_log::ScrapeLog, notes: &mut Vec<String>) -> ModelSpec {
    let mut reading = ModelSpec {
        block_size: None,
        capacity_tokens: None,
    };
    for endpoint in &log.endpoints {
        let last = |name: &str| -> Vec<f64> {
            endpoint
                .scalars(name)
                .flat_map(|(_, track)| {
                    track
                        .points()
                        .iter()
                        .filter(|point| point.present)
                        .map(|point| point.value)
                })
                .collect()
        };
        let mut capacities: Vec<(u64, u32, &'static str)> = Vec::new();
        for (labels, _) in endpoint.scalars("vllm:cache_config_info") {
            let label = |key: &str| {
                labels
                    .iter()
                    .find(|(name, _)| name == key)
                    .and_then(|(_, value)| value.parse::<u64>().ok())
            };
            if let (Some(block), Some(blocks)) = (label("block_size"), label("num_gpu_blocks")) {
                let block = u32::try_from(block).unwrap_or(u32::MAX);
                capacities.push((blocks * u64::from(block), block, "vllm:cache_config_info"));
            }
        }
        for tokens in last("sglang:max_total_num_tokens") {
            capacities.push((tokens as u64, 0, "sglang:max_total_num_tokens"));
        }
        let trtllm_blocks = last("trtllm_kv_cache_max_blocks");
        let trtllm_block = last("trtllm_kv_cache_tokens_per_block");
        if let (Some(blocks), Some(block)) = (trtllm_blocks.last(), trtllm_block.last()) {
            capacities.push((
                (blocks * block) as u64,
                *block as u32,
                "trtllm_kv_cache_max_blocks x trtllm_kv_cache_tokens_per_block",
            ));
        }
        let Some(&(largest, block, source)) = capacities.iter().max_by_key(|(tokens, ..)| *tokens)
        else {
            continue;
        };
        if capacities.iter().any(|(tokens, ..)| *tokens != largest) {
            let seen: Vec<String> = capacities
                .iter()
                .map(|(tokens, ..)| tokens.to_string())
                .collect();
            notes.push(format!(
                "{} reported different KV capacities ({} tokens: per worker, or a restart); the model uses the largest",
                endpoint.url,
                seen.join(", ")
            ));
        }
        reading.capacity_tokens = Some(Sourced {
            value: largest,
            source: source.to_owned(),
        });
        reading.block_size = (block > 0).then(|| Sourced {
            value: block,
            source: source.to_owned(),
        });
        break;
    }
    reading
}

/// The cache truth of `records` under `spec`; `None` when no record has a prompt chain (records
/// from before chains, or a run that hashed none).
pub fn cache_report(records: &[RequestRecord], spec: &ModelSpec) -> Option<CacheReport> {
    report_of(records, spec, Forget::Unreached).map(|(report, _)| report)
}

/// Whether the model forgets the blocks no later chain reaches (tests compare with keeping all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Forget {
    Unreached,
    #[cfg(test)]
    Nothing,
}

/// [`cache_report`], and the blocks the model still remembered at the end.
fn report_of(
    records: &[RequestRecord],
    spec: &ModelSpec,
    forget: Forget,
) -> Option<(CacheReport, usize)> {
    let chained: Vec<&RequestRecord> = records
        .iter()
        .filter(|rec| rec.prompt_blocks.is_some())
        .collect();
    let chain_block_size = chained.first()?.prompt_blocks.as_ref()?.block_size;
    let mut notes = Vec::new();
    let block_size = model_block_size(spec, chain_block_size, &mut notes);
    let keys = ChainKeys::new(&chained);
    let order = admission_order(&chained);
    let workers = Workers::of(&order);
    if workers.names.is_empty() {
        notes.push("the responses named no worker: one pool models every worker".to_owned());
    }
    let mut model = Model::new(spec, &block_size, workers.count(), &mut notes);
    let mut totals = Totals::default();
    let mut by_turn: BTreeMap<u32, Totals> = BTreeMap::new();
    let mut by_session: Sessions = Sessions::default();
    let factor = block_size.value / chain_block_size;
    let mut chain_scratch = Vec::new();
    let mut model_keys = Vec::new();
    let forget_after = keys.last_reached(&order);
    for (rank, rec) in order.iter().enumerate() {
        keys.fill(rec, &mut chain_scratch);
        model_keys.clear();
        model_keys.extend(
            chain_scratch
                .chunks_exact(factor as usize)
                .map(|chunk| chunk[chunk.len() - 1]),
        );
        let outcome = model.admit(
            rec,
            &model_keys,
            (block_size.value, factor),
            workers.rank_of(rec),
        );
        for &owner in forget_after[rank]
            .iter()
            .filter(|_| forget == Forget::Unreached)
        {
            model.forget(owner);
        }
        if rec.phase == Phase::Profiling {
            totals.add(rec, &outcome);
            by_turn.entry(rec.turn).or_default().add(rec, &outcome);
            by_session.of(rec).add(rec, &outcome);
        }
    }
    for rec in chained
        .iter()
        .filter(|rec| rec.phase == Phase::Profiling && rec.context_overflow)
    {
        totals.add_overflow(rec);
        by_turn.entry(rec.turn).or_default().add_overflow(rec);
        by_session.of(rec).add_overflow(rec);
    }
    let mut capacity_gaps_ms = std::mem::take(&mut model.capacity_gaps_ms);
    capacity_gaps_ms.sort_by(|a, b| a.0.total_cmp(&b.0));
    let remembered = model.last_use.owners();
    let report = CacheReport {
        definition: HIT_DEFINITION.to_owned(),
        chain_block_size,
        capacity_tokens: spec.capacity_tokens.clone(),
        workers: workers.count() as u64,
        routing: if workers.names.is_empty() {
            "one pool".to_owned()
        } else {
            "measured".to_owned()
        },
        requests: totals.requests,
        prompt_tokens: totals.prompt,
        measured: totals.measured(),
        measured_counters: None,
        achievable: Achievable {
            infinite: Rate::of(totals.hit_infinite, totals.prompt),
            pooled_at_capacity: model.capacity_rate(totals.hit_pooled, totals.prompt),
            per_worker_as_routed: Rate::of(totals.hit_routed, totals.prompt),
        },
        miss: totals.miss(),
        server_split: server_split(&order),
        evicted_blocks: model.per_worker.iter().map(Lru::evicted_total).sum(),
        capacity_gap_median_ms: agentx_record::dist::percentile_of_runs(&capacity_gaps_ms, 50.0),
        by_turn: by_turn
            .into_iter()
            .map(|(turn, row)| TurnRow {
                turn,
                requests: row.requests,
                prompt_tokens: row.prompt,
                measured: row.measured(),
                achievable: Rate::of(row.hit_routed, row.prompt),
                miss: row.miss(),
            })
            .collect(),
        by_session: by_session.rows(),
        block_size,
        notes,
    };
    Some((report, remembered))
}

/// Totals by session, in order of first appearance.
#[derive(Default)]
struct Sessions<'r> {
    index: HashMap<&'r str, usize>,
    rows: Vec<(&'r str, &'r str, Totals)>,
}

impl<'r> Sessions<'r> {
    /// The totals of `rec`'s session.
    fn of(&mut self, rec: &'r RequestRecord) -> &mut Totals {
        let session = rec.session_root();
        let next = self.rows.len();
        let at = *self.index.entry(session).or_insert(next);
        if at == next {
            let trace = rec
                .tree
                .as_ref()
                .map_or(rec.trace_id.as_str(), |tree| tree.source_trace_id.as_str());
            self.rows.push((session, trace, Totals::default()));
        }
        &mut self.rows[at].2
    }

    fn rows(self) -> Vec<SessionRow> {
        self.rows
            .into_iter()
            .map(|(session, trace_id, row)| SessionRow {
                session: session.to_owned(),
                trace_id: trace_id.to_owned(),
                requests: row.requests,
                prompt_tokens: row.prompt,
                measured: row.measured(),
                achievable: Rate::of(row.hit_routed, row.prompt),
                miss: row.miss(),
            })
            .collect()
    }
}

/// The model's block size: the spec's when it is a multiple of the chains', else the chains'.
fn model_block_size(spec: &ModelSpec, chain: u32, notes: &mut Vec<String>) -> Sourced<u32> {
    match &spec.block_size {
        Some(given) if given.value >= chain && given.value % chain == 0 => given.clone(),
        Some(given) => {
            notes.push(format!(
                "the block size {} ({}) is not a multiple of the chains' {chain}: the model uses {chain}; pass --kv-block-size {} to hash at the server's",
                given.value, given.source, given.value
            ));
            Sourced {
                value: chain,
                source: "the prompt chains".to_owned(),
            }
        }
        None => Sourced {
            value: chain,
            source: "the prompt chains".to_owned(),
        },
    }
}

/// A block's model key: the request that sent it first (its index) and its chain position.
fn block_key(owner: usize, position: usize) -> u64 {
    ((owner as u64) << 24) | position as u64
}

/// The key's first sender and chain position ([`block_key`] read back).
fn key_parts(key: u64) -> (u64, u32) {
    (key >> 24, (key & 0xFF_FFFF) as u32)
}

/// When each block ever cached was last used, by its first sender. A request's chain holds a
/// first sender's blocks from that sender's first own position up to where the chain leaves it,
/// so every use of a sender's blocks is a prefix of them: each sender keeps a few steps (an end
/// position and a time) instead of an entry a block. A 20-minute replay's report held hundreds of
/// MB of block entries; the steps hold a few words a request.
#[derive(Debug, Default)]
struct LastUse {
    /// By first sender: (end position, send time ns) steps whose ends fall from first to last.
    /// A position below the first step's end is remembered, last used at the time of the last
    /// step whose end is above it (the later uses cover the shorter prefixes).
    steps: BlockHashMap<Vec<(u32, u64)>>,
}

impl LastUse {
    /// When the block `key` was last used; `None` when it was never cached or is forgotten.
    fn get(&self, key: u64) -> Option<u64> {
        let (owner, position) = key_parts(key);
        let steps = self.steps.get(&owner)?;
        let step = steps.iter().rev().find(|(end, _)| *end > position)?;
        Some(step.1)
    }

    /// The block `key` was used at `at`, and so were the first sender's blocks before it (the
    /// chain that holds a block holds those too).
    fn insert(&mut self, key: u64, at: u64) {
        let (owner, position) = key_parts(key);
        let steps = self.steps.entry(owner).or_default();
        while steps.last().is_some_and(|(end, _)| *end <= position + 1) {
            steps.pop();
        }
        steps.push((position + 1, at));
    }

    /// Forgets the blocks request `owner` sent first.
    fn forget(&mut self, owner: usize) {
        self.steps.remove(&(owner as u64));
    }

    /// How many first senders' blocks are remembered.
    fn owners(&self) -> usize {
        self.steps.len()
    }
}

/// Each chained record's blocks, by following `from`.
struct ChainKeys<'r> {
    /// Request id to index of the chained records.
    index: HashMap<&'r str, usize>,
    records: &'r [&'r RequestRecord],
    /// Ids of `from` requests with no record (their blocks are keyed by these numbers).
    missing: std::cell::RefCell<HashMap<String, usize>>,
}

impl<'r> ChainKeys<'r> {
    fn new(records: &'r [&'r RequestRecord]) -> ChainKeys<'r> {
        ChainKeys {
            index: records
                .iter()
                .enumerate()
                .map(|(ix, rec)| (rec.request_id.as_str(), ix))
                .collect(),
            records,
            missing: std::cell::RefCell::default(),
        }
    }

    /// Writes `rec`'s block keys (one per chain block, first block first) into `out`: a block's
    /// key is (the request that sent it first, its position).
    fn fill(&self, rec: &RequestRecord, out: &mut Vec<u64>) {
        out.clear();
        let Some(blocks) = &rec.prompt_blocks else {
            return;
        };
        out.resize(blocks.blocks as usize, 0);
        self.walk(rec, |owner, positions| {
            for (position, key) in out
                .iter_mut()
                .enumerate()
                .take(positions.end)
                .skip(positions.start)
            {
                *key = block_key(owner, position);
            }
        });
    }

    /// Calls `owns` with each request whose blocks `rec`'s chain holds (its index, or a number past
    /// the records for a first sender with no record) and the chain positions it sent first, from
    /// `rec`'s own blocks back along `from`.
    fn walk(&self, rec: &RequestRecord, mut owns: impl FnMut(usize, std::ops::Range<usize>)) {
        let Some(blocks) = &rec.prompt_blocks else {
            return;
        };
        let mut owner = self.index.get(rec.request_id.as_str()).copied();
        let mut upto = blocks.blocks as usize;
        let mut current = Some(blocks);
        while let Some(chain) = current {
            let shared = (chain.shared as usize).min(upto);
            let Some(owner_ix) = owner else {
                break;
            };
            owns(owner_ix, shared..upto);
            upto = shared;
            if upto == 0 {
                return;
            }
            let from = chain.from.as_deref().unwrap_or_default();
            owner = self.index.get(from).copied();
            current = owner.and_then(|ix| self.records[ix].prompt_blocks.as_ref());
            if owner.is_none() {
                // The first sender left no record: its blocks are its own, keyed past the records.
                let mut missing = self.missing.borrow_mut();
                let next = self.records.len() + missing.len();
                let ix = *missing.entry(from.to_owned()).or_insert(next);
                drop(missing);
                owns(ix, 0..upto);
                return;
            }
        }
    }

    /// For each admission rank, the chained records whose own blocks no later admitted record's
    /// chain reaches: after that rank the model can forget them (`Model::forget`).
    fn last_reached(&self, order: &[&RequestRecord]) -> Vec<Vec<usize>> {
        let mut last_rank = vec![None; self.records.len()];
        for (rank, rec) in order.iter().enumerate() {
            self.walk(rec, |owner, _| {
                if let Some(last) = last_rank.get_mut(owner) {
                    *last = Some(rank);
                }
            });
        }
        let mut after_rank = vec![Vec::new(); order.len()];
        for (owner, last) in last_rank.into_iter().enumerate() {
            if let Some(rank) = last {
                after_rank[rank].push(owner);
            }
        }
        after_rank
    }
}

/// The records the server admitted, in the order it admitted them: by the simulator's admission
/// sequence when every one has it, else by send time. A request is admitted when the server
/// numbered it or sent a token; one refused (an error before any token) never reached its cache.
fn admission_order<'r>(records: &[&'r RequestRecord]) -> Vec<&'r RequestRecord> {
    let admit_seq = |rec: &RequestRecord| rec.server.as_ref().and_then(|side| side.admit_seq);
    let mut admitted: Vec<&RequestRecord> = records
        .iter()
        .copied()
        .filter(|rec| admit_seq(rec).is_some() || rec.first_token_ns.is_some())
        .collect();
    if admitted.iter().all(|rec| admit_seq(rec).is_some()) {
        admitted.sort_by_key(|rec| admit_seq(rec));
    } else {
        admitted.sort_by_key(|rec| (rec.send_ns, rec.request_id.clone()));
    }
    admitted
}

/// The workers the admitted responses named, when every one named its worker.
struct Workers {
    names: HashMap<String, usize>,
}

impl Workers {
    fn of(admitted: &[&RequestRecord]) -> Workers {
        let worker =
            |rec: &&RequestRecord| rec.server.as_ref().and_then(|side| side.worker.clone());
        if admitted.is_empty() || !admitted.iter().all(|rec| worker(rec).is_some()) {
            return Workers {
                names: HashMap::new(),
            };
        }
        let mut names = HashMap::new();
        for name in admitted.iter().filter_map(worker) {
            let next = names.len();
            names.entry(name).or_insert(next);
        }
        Workers { names }
    }

    fn count(&self) -> usize {
        self.names.len().max(1)
    }

    fn rank_of(&self, rec: &RequestRecord) -> usize {
        rec.server
            .as_ref()
            .and_then(|side| side.worker.as_deref())
            .and_then(|name| self.names.get(name).copied())
            .unwrap_or(0)
    }
}

/// The server's own split summed over the profiling requests, when every one gave it.
fn server_split(admitted: &[&RequestRecord]) -> Option<ServerMissSplit> {
    let mut split = ServerMissSplit::default();
    for rec in admitted.iter().filter(|rec| rec.phase == Phase::Profiling) {
        let truth = rec.server.as_ref().and_then(|side| side.truth)?;
        split.cold += truth.cold;
        split.capacity += truth.capacity;
        split.routing += truth.routing;
    }
    Some(split)
}

/// One admitted request as the models saw it, in the request's chain units (words).
#[derive(Debug, Default)]
struct Modelled {
    hit_infinite: u64,
    hit_pooled: u64,
    hit_routed: u64,
    cold: u64,
    bust: u64,
    divergence: u64,
    capacity: u64,
    routing: u64,
}

/// The three caches and what the attribution remembers.
struct Model {
    pooled: Option<Lru>,
    per_worker: Vec<Lru>,
    /// Every block ever cached that a later admitted request's chain can still reach, with when
    /// it was last used (send time, ns): also the infinite cache, which never evicts, so a block a
    /// later request looks up is in it exactly when it is here. The blocks no later chain reaches
    /// are forgotten ([`Model::forget`]), so it holds the run's reachable blocks, not every block.
    last_use: LastUse,
    /// Each stream's last admitted prompt (its model keys, as runs), by correlation id.
    previous: HashMap<String, KeyRuns>,
    /// The time since a capacity-missed block was last used, ms, one entry per run of blocks with
    /// the same time (a prompt's blocks share their last use): (gap, blocks).
    capacity_gaps_ms: Vec<(f64, u64)>,
}

/// A prompt's model keys as runs of consecutive keys (first key, length): a block's key is its
/// first sender and its position, so a prompt is a few runs, whatever its length.
#[derive(Debug, Default)]
struct KeyRuns {
    runs: Vec<(u64, u64)>,
    len: usize,
}

impl KeyRuns {
    fn of(keys: &[u64]) -> KeyRuns {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for &key in keys {
            match runs.last_mut() {
                Some((first, len)) if first.wrapping_add(*len) == key => *len += 1,
                _ => runs.push((key, 1)),
            }
        }
        KeyRuns {
            runs,
            len: keys.len(),
        }
    }

    /// How many leading keys `keys` shares with these.
    fn common_prefix(&self, keys: &[u64]) -> usize {
        let mut kept = 0;
        for &(first, len) in &self.runs {
            for offset in 0..len {
                if keys.get(kept) != Some(&first.wrapping_add(offset)) {
                    return kept;
                }
                kept += 1;
            }
        }
        kept
    }
}

impl Model {
    fn new(
        spec: &ModelSpec,
        block_size: &Sourced<u32>,
        workers: usize,
        notes: &mut Vec<String>,
    ) -> Model {
        let unbounded = u64::from(u32::MAX) - 2;
        let capacity_blocks = spec
            .capacity_tokens
            .as_ref()
            .map(|capacity| capacity.value / u64::from(block_size.value));
        if capacity_blocks.is_none() {
            notes.push(
                "no KV capacity reading: the at-capacity figures are null and no miss is counted for capacity; pass --kv-capacity-tokens".to_owned(),
            );
        }
        Model {
            pooled: capacity_blocks.map(|blocks| Lru::new(blocks.saturating_mul(workers as u64))),
            per_worker: (0..workers)
                .map(|_| Lru::new(capacity_blocks.unwrap_or(unbounded)))
                .collect(),
            last_use: LastUse::default(),
            previous: HashMap::new(),
            capacity_gaps_ms: Vec::new(),
        }
    }

    fn capacity_rate(&self, hit: u64, prompt: u64) -> Rate {
        if self.pooled.is_some() {
            Rate::of(hit, prompt)
        } else {
            Rate::none("no KV capacity reading; pass --kv-capacity-tokens")
        }
    }

    /// Drops the blocks request `owner` sent first from the blocks ever cached: no later admitted
    /// request's chain reaches them, so no later lookup can find them, and no figure changes. The
    /// LRU models keep them: they still take room there until evicted.
    fn forget(&mut self, owner: usize) {
        self.last_use.forget(owner);
    }

    /// Runs one admitted request through every cache (`block_size` words a model block, of
    /// `chain_blocks` chain blocks); its hits and misses in words.
    fn admit(
        &mut self,
        rec: &RequestRecord,
        keys: &[u64],
        (block_size, chain_blocks): (u32, u32),
        rank: usize,
    ) -> Modelled {
        let block = u64::from(block_size);
        let words = rec.prompt_blocks.as_ref().map_or(0, |chain| chain.words);
        // Model blocks another session sent with its own marker.
        let sent_unmarked = rec
            .prompt_blocks
            .as_ref()
            .and_then(|chain| chain.shared_unmarked)
            .map_or(0, |shared| (shared / chain_blocks.max(1)) as usize);
        let usable = (words.saturating_sub(1) / block).min(keys.len() as u64) as usize;
        let ever_cached = keys
            .iter()
            .take(usable)
            .take_while(|key| self.last_use.get(**key).is_some())
            .count();
        let mut modelled = Modelled {
            hit_infinite: ever_cached as u64 * block,
            hit_pooled: self.pooled.as_mut().map_or(0, |pool| {
                pool.lookup_and_insert(keys, usable).hit_blocks as u64 * block
            }),
            ..Modelled::default()
        };
        let hit = self.per_worker[rank]
            .lookup_and_insert(keys, usable)
            .hit_blocks;
        modelled.hit_routed = hit as u64 * block;
        // The positions of the stream's previous prompt that this one rewrote.
        let rewritten = self
            .previous
            .get(&rec.correlation_id)
            .map_or(0..0, |previous| previous.common_prefix(keys)..previous.len);
        for (position, key) in keys.iter().enumerate().take(usable).skip(hit) {
            let elsewhere = self
                .per_worker
                .iter()
                .enumerate()
                .any(|(other, cache)| other != rank && cache.contains(*key));
            if elsewhere {
                modelled.routing += block;
            } else if let Some(last) = self.last_use.get(*key) {
                modelled.capacity += block;
                let gap_ms = rec.send_ns.saturating_sub(last) as f64 / 1e6;
                match self.capacity_gaps_ms.last_mut() {
                    Some((run_gap, blocks)) if run_gap.total_cmp(&gap_ms).is_eq() => *blocks += 1,
                    _ => self.capacity_gaps_ms.push((gap_ms, 1)),
                }
            } else if position < sent_unmarked {
                modelled.bust += block;
            } else if rewritten.contains(&position) {
                modelled.divergence += block;
            } else {
                modelled.cold += block;
            }
        }
        modelled.cold += words.saturating_sub(usable as u64 * block);
        for &key in keys {
            self.last_use.insert(key, rec.send_ns);
        }
        self.previous
            .insert(rec.correlation_id.clone(), KeyRuns::of(keys));
        modelled
    }
}

/// Sums over requests, in the server's tokens.
#[derive(Debug, Default)]
struct Totals {
    requests: u64,
    prompt: u64,
    /// Cached tokens of the responses that reported them, and whether any did not.
    cached: u64,
    cached_missing: bool,
    hit_infinite: u64,
    hit_pooled: u64,
    hit_routed: u64,
    miss: MissTokens,
    unexplained: u64,
    surplus: u64,
}

impl Totals {
    fn add(&mut self, rec: &RequestRecord, modelled: &Modelled) {
        let words = rec.prompt_blocks.as_ref().map_or(0, |chain| chain.words);
        let prompt = rec.usage.prompt_tokens.unwrap_or(words);
        // Words to the server's tokens: exact when they are the same count.
        let to_tokens = |in_words: u64| -> u64 {
            if words == 0 || prompt == words {
                in_words
            } else {
                (u128::from(in_words) * u128::from(prompt) / u128::from(words)) as u64
            }
        };
        self.requests += 1;
        self.prompt += prompt;
        self.hit_infinite += to_tokens(modelled.hit_infinite);
        self.hit_pooled += to_tokens(modelled.hit_pooled);
        let routed = to_tokens(modelled.hit_routed);
        self.hit_routed += routed;
        self.miss.cold += to_tokens(modelled.cold);
        self.miss.bust += to_tokens(modelled.bust);
        self.miss.divergence += to_tokens(modelled.divergence);
        self.miss.capacity += to_tokens(modelled.capacity);
        self.miss.routing += to_tokens(modelled.routing);
        match rec.usage.cached_tokens {
            Some(cached) => {
                self.cached += cached;
                self.unexplained += routed.saturating_sub(cached);
                self.surplus += cached.saturating_sub(routed);
            }
            None => self.cached_missing = true,
        }
    }

    fn add_overflow(&mut self, rec: &RequestRecord) {
        let words = rec.prompt_blocks.as_ref().map_or(0, |chain| chain.words);
        let prompt = rec.usage.prompt_tokens.unwrap_or(words);
        self.requests += 1;
        self.prompt += prompt;
        self.miss.context_cap += prompt;
    }

    fn measured(&self) -> Rate {
        if self.cached_missing {
            Rate::none("a response reported no cached tokens (vLLM: --enable-prompt-tokens-details; SGLang: --enable-cache-report)")
        } else {
            Rate::of(self.cached, self.prompt)
        }
    }

    fn miss(&self) -> MissTokens {
        let measured = !self.cached_missing;
        MissTokens {
            unexplained: measured.then_some(self.unexplained),
            surplus: measured.then_some(self.surplus),
            ..self.miss.clone()
        }
    }
}

#[cfg(test)]
mod tests;
