//! The with-subagents shape (`agentx-host dataset synth --subagents`): traces shaped like InferenceX's
//! with-subagents corpora (semianalysis `cc-traces-weka-062126`, 393 traces), whose session trees
//! ([`crate::tree`]) have subagent streams, parallel fan-out, background branches and flat
//! worker chains.
//!
//! **The root.** Trace `i`'s main session is drawn exactly as the default shape draws trace `i` (same
//! seed, same stream, same requests and hash ids); everything added is drawn from a second generator
//! (the seed xor `SALT`, on the trace's stream), so a trace still depends only on (seed, index).
//! Times are re-derived in whole milliseconds (`t_k = t_{k-1} + api_{k-1} + gap_k`) so that a request
//! that starts when the previous one ends is an exact extension for hash-chain detection; a root turn
//! that joins subagents starts after the last of them ended, its `think_time` the whole wait.
//!
//! **Subagent entries** (`type: "subagent"`, listed after the root request that spawns them, in
//! start order; nested `t` absolute on the root clock, at or after the entry's `t`):
//! - `P_SUBAGENTS` of the traces have subagents. Those have a log-normal number of spawning root
//!   turns (median `SPAWNS_MEDIAN`, σ 0.8, 1-12; `tool_use` turns whose successor is neither a
//!   streaming/non-streaming twin nor a compaction), each spawning a fan-out of 1-5 subagents
//!   (`FANOUT`: 1 55%, 2 22%, 3 13%, 4 6%, 5 4%) that start within a few hundred ms of each other
//!   and overlap; the next root turn waits for all of them (one SPAWN branch, one join).
//! - `P_BACKGROUND` of those also launch one background subagent (`status: "async_launched"`,
//!   `duration_ms`, `total_tokens` and `tool_use_count` null) from the second-to-last root turn that
//!   outlives the root: no root turn joins it.
//! - A subagent is `Explore` (haiku, 55%), `general-purpose` (the root's model, 35%) or `Plan` (the
//!   root's model, 10%), with the type's declared tool (6-12k) and system (0.6-3k) tokens; subagents
//!   of one type share the hash ids of that prefix. It makes a log-normal number of sequential
//!   requests (median `REQUESTS_MEDIAN`, σ 0.9, 1-120, `--max-turns` caps it too), from the prefix
//!   plus a task prompt (median 1.5k tokens), each adding the previous output and a tool result
//!   (median 1.5k tokens), 0.1-60 s apart; it stops before 80% of a standard 200k context (or
//!   `--max-isl`). `duration_ms` runs from the entry's `t` to the end of its last request plus up to
//!   120 ms.
//!
//! **Flat worker chains** in the top level, which hash-chain detection splits off the main chain:
//! - `P_AUX` of the traces have 1-3 one-shot aux requests issued while a root turn runs: 70% on
//!   haiku (cross-model), 30% on the root's model with a small fresh context (under 12k tokens, so
//!   under the aux threshold of 16,384); each becomes `::aux:NNN`.
//! - `P_FORK` of the traces have a forked agent (25% of those a second one): 2-5 sequential
//!   requests on the root's model that start after a root turn, sharing the prefix the main chain had
//!   1-3 turns earlier and then growing on their own (never past the fork point's length); each
//!   becomes `::fa:NNN`. Forks are placed after the root's last compaction or rewind, where detection
//!   cannot mistake a later cut of the main chain for a continuation of the fork.
//!
//! With `--context` every token size above scales like the root's (`context / 200,000`, outputs by its
//! square root); aux requests keep at least two blocks. Hash ids continue the trace's local numbering
//! after the root's.

use super::{push_secs, push_u64, REFERENCE_CONTEXT};
use super::{root_chain, write_request, Draws, Req, RootChain, SynthOptions, BLOCK};

const HAIKU: &str = "claude-haiku-4-5-20251001";

/// Xored into the seed for the generator of everything but the root.
pub(crate) const SALT: u64 = 0x5ab_a6e7_5eed_0001;
/// Fraction of traces with subagent entries.
pub(crate) const P_SUBAGENTS: f64 = 0.85;
/// Median number of spawning root turns of a trace with subagents.
pub(crate) const SPAWNS_MEDIAN: f64 = 2.0;
/// Cumulative weights (in %) of a fan-out of 1, 2, 3, 4, 5 subagents.
pub(crate) const FANOUT: [u32; 5] = [55, 77, 90, 96, 100];
/// Fraction of traces with subagents that also launch a background subagent.
pub(crate) const P_BACKGROUND: f64 = 0.25;
/// Median number of requests of a subagent.
pub(crate) const REQUESTS_MEDIAN: f64 = 10.0;
/// Fraction of traces with aux requests in the top level.
pub(crate) const P_AUX: f64 = 0.45;
/// Fraction of traces with a forked flat agent.
pub(crate) const P_FORK: f64 = 0.30;

/// A subagent type: its name, whether it runs on haiku, its declared tool and system token ranges,
/// and its cumulative share (in %).
struct SubType {
    name: &'static str,
    haiku: bool,
    tool: (u32, u32),
    system: (u32, u32),
    upto: u32,
}

const TYPES: [SubType; 3] = [
    SubType {
        name: "Explore",
        haiku: true,
        tool: (6_000, 9_000),
        system: (600, 1_500),
        upto: 55,
    },
    SubType {
        name: "general-purpose",
        haiku: false,
        tool: (8_000, 12_000),
        system: (1_500, 3_000),
        upto: 90,
    },
    SubType {
        name: "Plan",
        haiku: false,
        tool: (6_000, 9_000),
        system: (1_000, 2_500),
        upto: 100,
    },
];

/// A request with its model and hash ids; `t` and times in whole milliseconds.
struct Item {
    t: u64,
    req: Req,
    model: &'static str,
    ids: Vec<u32>,
}

struct SubEntry {
    t: u64,
    agent: usize,
    kind: usize,
    /// `None`: launched in the background.
    duration_ms: Option<u64>,
    tool: u32,
    system: u32,
    reqs: Vec<Item>,
}

fn secs(millis: u64) -> f64 {
    millis as f64 / 1000.0
}

fn to_ms(seconds: f64) -> u64 {
    (seconds * 1000.0).round() as u64
}

/// The generator of everything but the root.
struct Gen<'o> {
    rng: Draws,
    opts: &'o SynthOptions,
    f: f64,
    g: f64,
    /// Subagent contexts stop below this many tokens.
    cap: u32,
    root_model: &'static str,
    next_id: u32,
    /// Per subagent type: declared tool and system tokens and the hash ids of that prefix.
    prefixes: [Option<(u32, u32, Vec<u32>)>; 3],
}

impl Gen<'_> {
    fn tok(&self, tokens: u32) -> u32 {
        if self.opts.context.is_some() {
            (f64::from(tokens) * self.f).round().max(1.0) as u32
        } else {
            tokens
        }
    }

    fn range_u64(&mut self, low: u64, high: u64) -> u64 {
        let high = high.max(low).min(u64::from(u32::MAX));
        u64::from(self.rng.range(low.min(high) as u32, high as u32))
    }

    /// Appends fresh ids to `ids` until it has `full` of them.
    fn fresh(&mut self, ids: &mut Vec<u32>, full: usize) {
        while ids.len() < full {
            ids.push(self.next_id);
            self.next_id += 1;
        }
    }

    fn fanout(&mut self) -> usize {
        let roll = self.rng.range(1, 100);
        FANOUT.iter().position(|&w| roll <= w).unwrap_or(0) + 1
    }

    fn api_ms(haiku: bool, input: u32, output: u32) -> u64 {
        let seconds = if haiku {
            0.25 + f64::from(output) / 150.0 + f64::from(input) / 400_000.0
        } else {
            0.4 + f64::from(output) / 70.0 + f64::from(input) / 200_000.0
        };
        to_ms(seconds).max(1)
    }

    /// `k` distinct elements of `from` (a partial Fisher-Yates shuffle), sorted.
    fn pick(&mut self, from: &[usize], count: usize) -> Vec<usize> {
        let mut pool = from.to_vec();
        let count = count.min(pool.len());
        for i in 0..count {
            let other = self.rng.range(i as u32, (pool.len() - 1) as u32) as usize;
            pool.swap(i, other);
        }
        pool.truncate(count);
        pool.sort_unstable();
        pool
    }

    /// A subagent whose entry starts at `marker`; with `outlive`, a background one whose last request
    /// ends after that instant.
    fn subagent(&mut self, marker: u64, agent: usize, outlive: Option<u64>) -> SubEntry {
        let roll = self.rng.range(1, 100);
        let kind = TYPES
            .iter()
            .position(|at_ms| roll <= at_ms.upto)
            .unwrap_or(0);
        let spec = &TYPES[kind];
        if self.prefixes[kind].is_none() {
            let tool = self.rng.range(self.tok(spec.tool.0), self.tok(spec.tool.1));
            let system = self
                .rng
                .range(self.tok(spec.system.0), self.tok(spec.system.1));
            let mut ids = Vec::new();
            self.fresh(&mut ids, ((tool + system) / BLOCK) as usize);
            self.prefixes[kind] = Some((tool, system, ids));
        }
        let (tool, system, prefix_ids) = self.prefixes[kind].clone().expect("drawn above");
        let model = if spec.haiku { HAIKU } else { self.root_model };
        let (ctx_scale, out_scale) = (self.f, self.g);
        let mut count = (self.rng.lognormal(REQUESTS_MEDIAN, 0.9).round() as usize).clamp(1, 120);
        if let Some(max_turns) = self.opts.max_turns {
            count = count.min(max_turns.max(1));
        }
        let task = self
            .rng
            .lognormal(1_500.0 * ctx_scale, 0.7)
            .clamp(f64::from(self.tok(200)), 20_000.0 * ctx_scale) as u32;
        let mut input = (tool + system + task)
            .min(self.cap.saturating_sub(1))
            .max(1);
        let mut ids: Vec<u32> = prefix_ids;
        ids.truncate((input / BLOCK) as usize);
        let mut reqs: Vec<Item> = Vec::with_capacity(count);
        let mut at_ms = marker + self.range_u64(0, 50);
        for j in 0..count {
            let mut think = 0;
            if let Some(prev) = reqs.last() {
                let add = self
                    .rng
                    .lognormal(1_500.0 * ctx_scale, 1.0)
                    .clamp(f64::from(self.tok(20)), 30_000.0 * ctx_scale)
                    as u32;
                let next = input.saturating_add(prev.req.output).saturating_add(add);
                if next >= self.cap {
                    break;
                }
                input = next;
                think = to_ms(self.rng.lognormal(1.0, 0.9).clamp(0.1, 60.0));
                at_ms = prev.t + to_ms(prev.req.api_time) + think;
            }
            let last = j + 1 == count;
            let output = if last {
                self.rng
                    .lognormal(500.0 * out_scale, 0.8)
                    .clamp(20.0, 8_000.0 * out_scale)
            } else {
                self.rng
                    .lognormal(150.0 * out_scale, 1.0)
                    .clamp(1.0, 4_000.0 * out_scale)
            } as u32;
            self.fresh(&mut ids, (input / BLOCK) as usize);
            let api = Self::api_ms(spec.haiku, input, output);
            reqs.push(Item {
                t: at_ms,
                req: Req {
                    t: secs(at_ms),
                    streaming: self.rng.chance(0.7),
                    input,
                    output,
                    ids_keep: 0,
                    ids_new: 0..0,
                    input_types: if j == 0 { "text" } else { "tool_result" },
                    output_types: if last { "text" } else { "text,tool_use" },
                    stop: if last { "end_turn" } else { "tool_use" },
                    api_time: secs(api),
                    think_time: Some(secs(think)),
                },
                model,
                ids: ids.clone(),
            });
        }
        let duration_ms = match outlive {
            Some(until) => {
                let last_req = reqs.last_mut().expect("at least one request");
                if last_req.t + to_ms(last_req.req.api_time) <= until {
                    let moved = until + self.range_u64(1, 5_000);
                    if let Some(think) = last_req.req.think_time.as_mut() {
                        *think += secs(moved - last_req.t);
                    }
                    last_req.t = moved;
                    last_req.req.t = secs(moved);
                }
                None
            }
            None => {
                let last_req = reqs.last().expect("at least one request");
                Some(last_req.t + to_ms(last_req.req.api_time) - marker + self.range_u64(5, 120))
            }
        };
        SubEntry {
            t: marker,
            agent,
            kind,
            duration_ms,
            tool,
            system,
            reqs,
        }
    }

    /// A one-shot aux request at `t`: on haiku, or on the root's model with a small fresh context.
    fn aux(&mut self, at_ms: u64) -> Item {
        let cross = self.rng.chance(0.7);
        let ctx_scale = self.f;
        let input = if cross {
            self.rng.lognormal(700.0 * ctx_scale, 0.8)
        } else {
            self.rng.lognormal(2_500.0 * ctx_scale, 0.7)
        }
        .clamp(130.0, 12_000.0)
        .min(f64::from(self.cap.saturating_sub(1)).max(130.0)) as u32;
        let output = self.rng.lognormal(40.0, 0.8).clamp(1.0, 400.0) as u32;
        let mut ids = Vec::new();
        self.fresh(&mut ids, (input / BLOCK) as usize);
        let model = if cross { HAIKU } else { self.root_model };
        let api = Self::api_ms(cross, input, output);
        Item {
            t: at_ms,
            req: Req {
                t: secs(at_ms),
                streaming: self.rng.chance(0.5),
                input,
                output,
                ids_keep: 0,
                ids_new: 0..0,
                input_types: "text",
                output_types: "text",
                stop: "end_turn",
                api_time: secs(api),
                think_time: Some(0.0),
            },
            model,
            ids,
        }
    }

    /// A forked agent starting at `start` from `prefix` (the main chain's ids some turns back), its
    /// requests adding at most `budget` blocks in all.
    fn fork(&mut self, prefix: &[u32], budget: usize, start: u64) -> Vec<Item> {
        let count = (self.rng.range(2, 5) as usize).min(budget);
        let step = (budget / count).max(1) as u32;
        let out_scale = self.g;
        let mut ids = prefix.to_vec();
        let mut out: Vec<Item> = Vec::with_capacity(count);
        let mut at_ms = start;
        for j in 0..count {
            let mut think = 0;
            if let Some(prev) = out.last() {
                think = to_ms(self.rng.lognormal(1.5, 1.0).clamp(0.1, 30.0));
                at_ms = prev.t + to_ms(prev.req.api_time) + think;
            }
            let add = self.rng.range(1, step) as usize;
            let full = ids.len() + add;
            self.fresh(&mut ids, full);
            let input = ids.len() as u32 * BLOCK + self.rng.range(0, BLOCK - 1);
            let last = j + 1 == count;
            let output = self
                .rng
                .lognormal(200.0 * out_scale, 1.0)
                .clamp(1.0, 4_000.0 * out_scale) as u32;
            let api = Self::api_ms(false, input, output);
            out.push(Item {
                t: at_ms,
                req: Req {
                    t: secs(at_ms),
                    streaming: self.rng.chance(0.7),
                    input,
                    output,
                    ids_keep: 0,
                    ids_new: 0..0,
                    input_types: if j == 0 { "text" } else { "tool_result" },
                    output_types: if last { "text" } else { "text,tool_use" },
                    stop: if last { "end_turn" } else { "tool_use" },
                    api_time: secs(api),
                    think_time: Some(secs(think)),
                },
                model: self.root_model,
                ids: ids.clone(),
            });
        }
        out
    }
}

/// The hash ids of root request `k`.
fn root_ids(reqs: &[Req], last: usize) -> Vec<u32> {
    let mut cur = Vec::new();
    for r in &reqs[..=last] {
        cur.truncate(r.ids_keep);
        cur.extend(r.ids_new.clone());
    }
    cur
}

fn push_str_list(out: &mut Vec<u8>, items: &[&str]) {
    out.push(b'[');
    for (i, s) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    }
    out.push(b']');
}

fn push_opt(out: &mut Vec<u8>, value: Option<u64>) {
    match value {
        Some(x) => push_u64(out, x),
        None => out.extend_from_slice(b"null"),
    }
}

/// One top-level entry in list order.
enum Entry {
    Root(usize),
    Sub(usize),
    Flat(usize),
}

/// Generates trace `index` of a with-subagents corpus as one JSON line (without the newline); returns
/// its number of requests (top-level and nested).
pub(super) fn trace_line(opts: &SynthOptions, index: usize, out: &mut Vec<u8>) -> usize {
    let RootChain {
        model,
        tool,
        system,
        sys_blocks,
        next_id,
        mut reqs,
    } = root_chain(opts, &mut Draws::new(opts.seed, index));
    let ctx_scale = opts
        .context
        .map_or(1.0, |c| f64::from(c) / REFERENCE_CONTEXT);
    let mut gen = Gen {
        rng: Draws::new(opts.seed ^ SALT, index),
        opts,
        f: ctx_scale,
        g: ctx_scale.sqrt(),
        cap: 0,
        root_model: model,
        next_id,
        prefixes: [None, None, None],
    };
    let standard = opts
        .max_isl
        .map_or(gen.tok(200_000), |m| m.min(gen.tok(200_000)));
    gen.cap = (f64::from(standard) * 0.8) as u32;

    let count = reqs.len();
    let api: Vec<u64> = reqs.iter().map(|r| to_ms(r.api_time).max(1)).collect();
    let mut gap: Vec<u64> = reqs
        .iter()
        .map(|r| r.think_time.map_or(1000, to_ms))
        .collect();
    let len: Vec<usize> = reqs.iter().map(|r| r.ids_keep + r.ids_new.len()).collect();
    let cut: Vec<bool> = (0..count)
        .map(|bg_turn| bg_turn > 0 && reqs[bg_turn].ids_keep < len[bg_turn - 1])
        .collect();
    let twin: Vec<bool> = (0..count)
        .map(|bg_turn| bg_turn > 0 && reqs[bg_turn].ids_new.is_empty() && gap[bg_turn] == 0)
        .collect();

    // Subagent plan: spawning turns, and a background subagent from the second-to-last turn.
    let with_sub = gen.rng.chance(P_SUBAGENTS);
    let background = with_sub && count >= 2 && gen.rng.chance(P_BACKGROUND) && gap[count - 1] >= 2;
    let candidates: Vec<usize> = (0..count.saturating_sub(1))
        .filter(|&bg_turn| {
            let reserved = background && bg_turn == count - 2;
            reqs[bg_turn].stop == "tool_use" && !twin[bg_turn + 1] && !cut[bg_turn + 1] && !reserved
        })
        .collect();
    let spawns = if with_sub {
        (gen.rng.lognormal(SPAWNS_MEDIAN, 0.8).round() as usize).clamp(1, 12)
    } else {
        0
    };
    let spawn_turns = gen.pick(&candidates, spawns);

    // The root timeline in ms, each join waiting for its fan-out.
    let (starts, mut subs) = root_timeline(&mut gen, &spawn_turns, &api, &mut gap);
    if background {
        let bg_turn = count - 2;
        let marker = starts[bg_turn] + api[bg_turn] + gen.range_u64(1, 300).min(gap[count - 1] - 1);
        let sub = gen.subagent(marker, subs.len() + 1, Some(starts[count - 1]));
        subs.push(sub);
    }

    let flats = flat_chains(&mut gen, &reqs, &starts, &api, &len, &cut, sys_blocks);

    // Root times, in whole ms.
    for (bg_turn, r) in reqs.iter_mut().enumerate() {
        r.t = secs(starts[bg_turn]);
        r.api_time = secs(api[bg_turn]);
        if r.think_time.is_some() {
            r.think_time = Some(secs(gap[bg_turn]));
        }
    }

    // Top-level list order: by start, root requests before entries and flat requests at one instant.
    let mut order: Vec<(u64, u8, usize, Entry)> =
        Vec::with_capacity(count + subs.len() + flats.len());
    order.extend((0..count).map(|bg_turn| (starts[bg_turn], 0, bg_turn, Entry::Root(bg_turn))));
    order.extend(
        subs.iter()
            .enumerate()
            .map(|(i, sub)| (sub.t, 1, i, Entry::Sub(i))),
    );
    order.extend(
        flats
            .iter()
            .enumerate()
            .map(|(i, x)| (x.t, 2, i, Entry::Flat(i))),
    );
    order.sort_by_key(|e| (e.0, e.1, e.2));

    let mut models: Vec<&str> = vec![model];
    let mut note = |m: &'static str| {
        if !models.contains(&m) {
            models.push(m);
        }
    };
    for sub in &subs {
        sub.reqs.iter().for_each(|r| note(r.model));
    }
    flats.iter().for_each(|r| note(r.model));

    let head = TraceHead {
        index,
        models: &models,
        tool,
        system,
    };
    write_trace(out, &head, &order, (model, &reqs), &subs, &flats)
}

/// The root's start times (ms), and the subagents of each spawning turn, each join waiting for
/// its fan-out (`gap` grows where it must).
fn root_timeline(
    gen: &mut Gen<'_>,
    spawn_turns: &[usize],
    api: &[u64],
    gap: &mut [u64],
) -> (Vec<u64>, Vec<SubEntry>) {
    let count = api.len();
    let mut starts = vec![0u64; count];
    let mut subs: Vec<SubEntry> = Vec::new();
    let mut next_spawn = spawn_turns.iter().copied().peekable();
    let mut wait_until: Option<u64> = None;
    for k in 0..count {
        if k > 0 {
            let ready = starts[k - 1] + api[k - 1];
            if let Some(until) = wait_until.take() {
                gap[k] = gap[k].max(until.saturating_sub(ready));
            }
            starts[k] = ready + gap[k];
        }
        if next_spawn.peek() == Some(&k) {
            next_spawn.next();
            let fan = gen.fanout();
            let base = starts[k] + api[k] + gen.range_u64(1, 200);
            let mut end = 0;
            for i in 0..fan {
                let marker = base + i as u64 * gen.range_u64(0, 150);
                let sub = gen.subagent(marker, subs.len() + 1, None);
                end = end.max(marker + sub.duration_ms.unwrap_or(0));
                subs.push(sub);
            }
            wait_until = Some(end + gen.range_u64(1, 500));
        }
    }
    (starts, subs)
}

/// Flat chains: aux one-shots, then forked agents.
fn flat_chains(
    gen: &mut Gen<'_>,
    reqs: &[Req],
    starts: &[u64],
    api: &[u64],
    len: &[usize],
    cut: &[bool],
    sys_blocks: usize,
) -> Vec<Item> {
    let count = reqs.len();
    let mut flats: Vec<Item> = Vec::new();
    if count >= 2 && gen.rng.chance(P_AUX) {
        for _ in 0..gen.rng.range(1, 3) {
            let turn = gen.rng.range(1, (count - 1) as u32) as usize;
            let aux_at = starts[turn] + gen.range_u64(1, api[turn]);
            flats.push(gen.aux(aux_at));
        }
    }
    if gen.rng.chance(P_FORK) {
        let last_cut = (0..count).rev().find(|&turn| cut[turn]).unwrap_or(0);
        let mut longest_fork = 0usize;
        let forks = if gen.rng.chance(0.25) { 2 } else { 1 };
        for _ in 0..forks {
            let back = gen.rng.range(1, 3) as usize;
            let cands: Vec<usize> = (back..count.saturating_sub(2))
                .filter(|&turn| {
                    let prefix_len = len[turn - back];
                    turn - back >= last_cut
                        && prefix_len > sys_blocks
                        && prefix_len > longest_fork
                        && len[turn] >= prefix_len + 2
                })
                .collect();
            if cands.is_empty() {
                break;
            }
            let turn = cands[gen.rng.range(0, (cands.len() - 1) as u32) as usize];
            let prefix_len = len[turn - back];
            let prefix = root_ids(reqs, turn - back);
            let start = starts[turn] + api[turn] + gen.range_u64(1, 300);
            flats.extend(gen.fork(&prefix, len[turn] - prefix_len, start));
            longest_fork = len[turn];
        }
    }
    flats
}

/// The trace-level fields of a trace line.
struct TraceHead<'m> {
    index: usize,
    models: &'m [&'m str],
    tool: u32,
    system: u32,
}

/// Writes the trace line: its fields, the top-level entries in `order` and the totals; returns its
/// number of requests.
fn write_trace(
    out: &mut Vec<u8>,
    head: &TraceHead<'_>,
    order: &[(u64, u8, usize, Entry)],
    (model, reqs): (&str, &[Req]),
    subs: &[SubEntry],
    flats: &[Item],
) -> usize {
    let (index, models, tool, system) = (head.index, head.models, head.tool, head.system);
    let trace_id = format!("trace_{:04}", index + 1);
    out.extend_from_slice(b"{\"id\":\"");
    out.extend_from_slice(trace_id.as_bytes());
    out.extend_from_slice(b"\",\"models\":");
    push_str_list(out, models);
    out.extend_from_slice(b",\"block_size\":64,\"hash_id_scope\":\"local\",\"tool_tokens\":");
    push_u64(out, u64::from(tool));
    out.extend_from_slice(b",\"system_tokens\":");
    push_u64(out, u64::from(system));
    out.extend_from_slice(b",\"requests\":[");
    let (mut parent_in, mut parent_out, mut sub_in, mut sub_out) = (0u64, 0u64, 0u64, 0u64);
    let mut cur: Vec<u32> = Vec::new();
    let mut count = 0usize;
    for (i, (_, _, _, e)) in order.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match *e {
            Entry::Root(k) => {
                let req = &reqs[k];
                cur.truncate(req.ids_keep);
                cur.extend(req.ids_new.clone());
                parent_in += u64::from(req.input);
                parent_out += u64::from(req.output);
                write_request(out, req, model, &cur);
                count += 1;
            }
            Entry::Flat(j) => {
                let flat = &flats[j];
                parent_in += u64::from(flat.req.input);
                parent_out += u64::from(flat.req.output);
                write_request(out, &flat.req, flat.model, &flat.ids);
                count += 1;
            }
            Entry::Sub(j) => {
                count += write_subagent(out, &subs[j], &mut sub_in, &mut sub_out);
            }
        }
    }
    let pair = |out: &mut Vec<u8>, a: u64, b: u64| {
        out.extend_from_slice(b"{\"input\":");
        push_u64(out, a);
        out.extend_from_slice(b",\"output\":");
        push_u64(out, b);
        out.push(b'}');
    };
    out.extend_from_slice(b"],\"totals\":{\"parent_tokens\":");
    pair(out, parent_in, parent_out);
    out.extend_from_slice(b",\"subagent_tokens\":");
    pair(out, sub_in, sub_out);
    out.extend_from_slice(b",\"combined_tokens\":");
    pair(out, parent_in + sub_in, parent_out + sub_out);
    out.extend_from_slice(b",\"subagent_count\":");
    push_u64(out, subs.len() as u64);
    out.extend_from_slice(b"}}");
    count
}

/// Writes one subagent entry with its requests, adding their tokens; returns its number of requests.
fn write_subagent(out: &mut Vec<u8>, sub: &SubEntry, sub_in: &mut u64, sub_out: &mut u64) -> usize {
    let spec = &TYPES[sub.kind];
    out.extend_from_slice(b"{\"t\":");
    push_secs(out, secs(sub.t));
    out.extend_from_slice(b",\"type\":\"subagent\",\"agent_id\":\"agent_");
    out.extend_from_slice(format!("{:03}", sub.agent).as_bytes());
    out.extend_from_slice(b"\",\"subagent_type\":\"");
    out.extend_from_slice(spec.name.as_bytes());
    out.extend_from_slice(b"\",\"duration_ms\":");
    push_opt(out, sub.duration_ms);
    let done = sub.duration_ms.is_some();
    let total: u64 = sub
        .reqs
        .iter()
        .map(|r| u64::from(r.req.input) + u64::from(r.req.output))
        .sum();
    let tools = sub.reqs.iter().filter(|r| r.req.stop == "tool_use").count() as u64;
    out.extend_from_slice(b",\"total_tokens\":");
    push_opt(out, done.then_some(total));
    out.extend_from_slice(b",\"tool_use_count\":");
    push_opt(out, done.then_some(tools));
    out.extend_from_slice(if done {
        b",\"status\":\"completed\",\"requests\":["
    } else {
        b",\"status\":\"async_launched\",\"requests\":["
    });
    for (q, r) in sub.reqs.iter().enumerate() {
        if q > 0 {
            out.push(b',');
        }
        *sub_in += u64::from(r.req.input);
        *sub_out += u64::from(r.req.output);
        write_request(out, &r.req, r.model, &r.ids);
    }
    out.extend_from_slice(b"],\"models\":");
    push_str_list(out, &[sub.reqs[0].model]);
    out.extend_from_slice(b",\"tool_tokens\":");
    push_u64(out, u64::from(sub.tool));
    out.extend_from_slice(b",\"system_tokens\":");
    push_u64(out, u64::from(sub.system));
    out.push(b'}');
    sub.reqs.len()
}

#[cfg(test)]
mod tests;
