//! Session trees: one weka trace turned into the streams AgentX v1 replays (agentx-v1.md §2,
//! docs/agentx-v1-reference.md M1/M2/M6), exactly as aiperf 0.13.0.dev20261023's weka loader builds
//! its conversations.
//!
//! This module owns the dataset side of a tree: which requests form which stream (the root's main
//! chain, one stream per subagent chain, one per flat worker chain of the top level), the streams'
//! aiperf conversation ids (`<trace>`, `<trace>::sa:<agent>[:aux|fa|wg:…]`, `<trace>::fa:NNN`,
//! `::aux:NNN`, `::wg:GGG_MMM`), parents, spawn and join turns and their grouping into SPAWN
//! branches, per-turn timestamps on the root clock, end-to-start delays (aiperf's formula with its
//! quirks), prefix-cache stamps, and the replay-barrier predecessors. It knows nothing of time,
//! scheduling or prompt text: the host scheduler replays a [`SessionTree`]; prompt synthesis (the
//! message roles and `reset_context` of each turn) stays with [`super::prompt`].
//!
//! Invariants of a built tree: stream 0 is the root; every other stream has depth 1, the root as
//! parent, and exactly one branch; turn timestamps are finite; a stream's turns are in replay order.
//!
//! **Errors** (aiperf refuses the trace too): a `t` that is not finite or negative (top-level, marker
//! or nested; the importer substitutes such values with a warning, the tree does not), `1000·t` not
//! finite, under the absolute basis a nested request more than 1e-6 s before its marker (it cannot be
//! placed on the root clock), a subagent without `agent_id`, and two retained subagents with the same
//! `agent_id`.
//!
//! **Counted outcomes** (aiperf accepts them; [`TreeCounts`]): nested requests clamped to their
//! marker (absolute basis, less than 1e-6 s early), subagents without a preceding root request
//! (dropped, listed in [`SessionTree::dropped_subagents`]), subagents without requests (one stream
//! without turns, which the scheduler treats as done at once), requests without hash ids (kept on
//! their layer's main chain), seams spliced, and the classes of the worker chains.

pub mod chain;
pub mod corpus;

use std::collections::HashMap;

use super::error::{DatasetError, Location};
use super::warnings::WarningKind;
use super::weka::{ParsedRequest, ParsedSubagent, ParsedTrace};
use chain::{ChainClass, ChainParams, Detection, Req, EPS};

/// How nested (subagent) timestamps are read: chosen once per corpus (`--weka-nested-timestamp-basis`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NestedBasis {
    /// Nested `t` is on the root clock; one more than 1e-6 s before its marker is an error, one
    /// within 1e-6 s is clamped to the marker.
    Absolute,
    /// Nested `t` is relative to its marker: `t += marker.t`.
    Relative,
}

impl NestedBasis {
    /// aiperf's `auto`: relative if any nested request of the corpus starts more than 1e-6 s before
    /// its marker, else absolute.
    pub fn infer<'a>(traces: impl IntoIterator<Item = &'a ParsedTrace>) -> NestedBasis {
        let relative = traces.into_iter().any(|t| {
            t.subagent_entries
                .iter()
                .any(|s| s.requests.iter().any(|r| r.t < s.t - EPS))
        });
        if relative {
            NestedBasis::Relative
        } else {
            NestedBasis::Absolute
        }
    }
}

/// Options of [`build`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TreeOptions {
    pub basis: NestedBasis,
    /// `--synthesis-max-osl`: caps `max_tokens` of root and flat turns (subagent turns are not capped).
    pub max_osl: Option<u32>,
    /// `AIPERF_DATASET_WEKA_SPLIT_FLATTENED_AGENTS` (default true): run chain detection. Off: one root
    /// stream in file order and one stream per subagent in `(t, index)` order.
    pub split_chains: bool,
    pub chains: ChainParams,
}

impl Default for TreeOptions {
    fn default() -> Self {
        TreeOptions {
            basis: NestedBasis::Absolute,
            max_osl: None,
            split_chains: true,
            chains: ChainParams::default(),
        }
    }
}

/// What produced a turn's new input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum InputKind {
    ToolResult,
    UserInput,
}

/// Which part of the trace a stream replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum StreamKind {
    /// The root: the trace's main chain (`weka_main`).
    Main,
    /// A chain of a subagent entry (`weka_subagent`).
    Subagent,
    /// A worker chain of the top level (`weka_flat`).
    Flat,
}

/// One replayed request.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TreeTurn {
    /// Recorded start, ms on the root clock (`1000·t`).
    pub ts_ms: f64,
    /// End-to-start delay after the previous turn of the stream; `None` on turn 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<f64>,
    /// The delay under `--use-think-time-only` (`1000·think_time` when recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms_think_time_only: Option<f64>,
    /// `1000·max(0, api_time)`; `None` when missing or not finite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_time_ms: Option<f64>,
    /// `max(1, min(out, max_osl))` (root and flat), `max(1, out)` (subagent).
    pub max_tokens: u32,
    /// Theoretical prefix-cache stamp: leading hash ids already sent by the trace, of all.
    pub prefix_hit_blocks: u32,
    pub prefix_total_blocks: u32,
    /// Where the request sits in the trace: outer index, and inner index for a nested request.
    pub source_outer_idx: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_inner_idx: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_kind: Option<InputKind>,
    /// Branches (indices into [`SessionTree::branches`]) this turn spawns and joins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spawns: Vec<usize>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub joins: Vec<usize>,
    /// Replay-barrier predecessors `(stream, turn)` in its scope, sorted by (conversation id, turn).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replay_predecessors: Vec<(usize, usize)>,
}

/// One stream (an aiperf conversation).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Stream {
    pub id: String,
    pub kind: StreamKind,
    /// The class of a worker chain (a subagent's chain 0 and the root have none).
    pub class: Option<ChainClass>,
    /// 0 for the root, 1 otherwise.
    pub depth: u8,
    /// The parent stream (the root) of a child.
    pub parent: Option<usize>,
    /// The branch a child belongs to.
    pub branch: Option<usize>,
    /// Barrier scope: the trace id (root and flat streams) or `<trace>::sa:<agent_id>`.
    pub replay_scope: String,
    /// Turn-0 tool and system tokens (the declared ones, or 0/0 when not proven shared).
    pub init_tool_tokens: u32,
    pub init_system_tokens: u32,
    /// The stream and turn holding the request this stream forked from (a subagent's chain 0: the
    /// spawning root turn).
    pub fork_source: Option<(usize, usize)>,
    pub turns: Vec<TreeTurn>,
}

/// A SPAWN branch: children started together from one root turn.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Branch {
    /// `<trace>:spawn:<first agent_id>` or `<trace>:flatspawn:<n of the first worker>`.
    pub id: String,
    pub children: Vec<usize>,
    pub spawn_turn: usize,
    /// The root turn that waits for the children; `None`: they run in the background.
    pub join_turn: Option<usize>,
    pub start_timestamp_ms: f64,
}

/// Counted outcomes of one build (over the streams built; dropped subagents are not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TreeCounts {
    /// Nested requests less than 1e-6 s before their marker, moved onto it (absolute basis).
    pub clamped_requests: usize,
    /// Retained subagents without requests (one stream without turns each).
    pub empty_subagents: usize,
    /// Replayed requests without hash ids.
    pub empty_hash_requests: usize,
    /// Seams spliced in the top level (subagent layers' seams are not counted, as in aiperf).
    pub seams: usize,
    /// Worker chains classified aux (reductions included), reduction, worker-group member.
    pub aux: usize,
    pub reductions: usize,
    pub worker_group: usize,
}

/// One trace as a tree of streams.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SessionTree {
    pub trace_id: String,
    /// Root first, then subagent streams (entry order, chain order), then flat streams.
    pub streams: Vec<Stream>,
    pub branches: Vec<Branch>,
    /// `agent_id`s of subagent entries without a preceding root request.
    pub dropped_subagents: Vec<String>,
    pub counts: TreeCounts,
}

/// A request with its canonical start and position.
#[derive(Debug, Clone, Copy)]
struct Src<'a> {
    req: &'a ParsedRequest,
    t: f64,
    outer: u32,
    inner: Option<u32>,
}

impl<'a> Src<'a> {
    fn chain_req(&self) -> Req<'a> {
        Req {
            index: self.inner.unwrap_or(self.outer),
            t: self.t,
            api_time: self.req.recorded_api_time,
            model: &self.req.model,
            hash_ids: &self.req.hash_ids,
            input: self.req.input,
            output: self.req.output,
        }
    }
}

/// One layer split into chains: main (preamble re-attached), then workers with their class.
struct Split {
    /// Positions in the layer's slice, per chain; chain 0 is the main chain.
    pub chains: Vec<Vec<usize>>,
    pub classes: Vec<Option<ChainClass>>,
    /// Per chain: the index of the request it forked from.
    pub fork_index: Vec<Option<u32>>,
    pub detection: Option<Detection>,
    /// Positions of the detected main chain (preamble excluded): the classification yardstick.
    pub detected_main: Vec<usize>,
}

/// Splits a layer: preamble, detection, classification. With `top`, the layer keeps its file order
/// when detection finds no worker (aiperf returns early); a subagent layer is always in chain order.
fn split_layer(reqs: &[Req<'_>], p: &ChainParams, top: bool) -> Split {
    let by_t = |v: &mut Vec<usize>| {
        v.sort_by(|&a, &b| {
            chain::fcmp(reqs[a].t, reqs[b].t).then(reqs[a].index.cmp(&reqs[b].index))
        })
    };
    let pre = chain::preamble(reqs);
    let rest: Vec<usize> = (0..reqs.len()).filter(|&i| Some(i) != pre).collect();
    let sub: Vec<Req<'_>> = rest.iter().map(|&i| reqs[i]).collect();
    let d = chain::detect(&sub, p);
    if d.chains.is_empty() {
        let mut all: Vec<usize> = (0..reqs.len()).collect();
        if !top {
            by_t(&mut all);
        }
        return Split {
            chains: vec![all],
            classes: vec![None],
            fork_index: vec![None],
            detection: None,
            detected_main: Vec::new(),
        };
    }
    let detected_main: Vec<usize> = d.chains[d.main_index]
        .requests
        .iter()
        .map(|&q| rest[q])
        .collect();
    if top && d.worker_indices.is_empty() {
        return Split {
            chains: vec![(0..reqs.len()).collect()],
            classes: vec![None],
            fork_index: vec![None],
            detection: Some(d),
            detected_main,
        };
    }
    let mut main = detected_main.clone();
    if let Some(pi) = pre {
        main.push(pi);
        by_t(&mut main);
    }
    let groups = chain::worker_groups(&sub, &d, p);
    let mut chains = vec![main];
    let mut classes = vec![None];
    let mut fork_index = vec![None];
    for &ci in &d.worker_indices {
        chains.push(d.chains[ci].requests.iter().map(|&q| rest[q]).collect());
        classes.push(Some(chain::classify(&sub, &d, ci, &groups, p)));
        fork_index.push(d.chains[ci].fork.as_ref().and_then(|f| f.fork_index));
    }
    Split {
        chains,
        classes,
        fork_index,
        detection: Some(d),
        detected_main,
    }
}

/// aiperf's `_chain_init_tokens`: the declared tool/system tokens when the chain's first hash list
/// and the base's agree on the declared prefix blocks, else 0/0.
fn chain_init_tokens(
    tool: u32,
    system: u32,
    block_size: u32,
    base: &[u32],
    first: &[u32],
) -> (u32, u32) {
    let blocks = (u64::from(tool) + u64::from(system)).div_ceil(u64::from(block_size)) as usize;
    if blocks > 0
        && first.len() >= blocks
        && base.len() >= blocks
        && first[..blocks] == base[..blocks]
    {
        (tool, system)
    } else {
        (0, 0)
    }
}

struct Ctx<'a> {
    trace: &'a ParsedTrace,
}

impl Ctx<'_> {
    fn err(&self, field: String, message: impl Into<String>) -> DatasetError {
        let mut location: Location = self.trace.location.clone();
        location.trace = Some(self.trace.id.clone());
        location.field = Some(field);
        DatasetError::Invalid {
            location,
            message: message.into(),
        }
    }
}

fn check_t(ctx: &Ctx<'_>, field: impl FnOnce() -> String, t: f64) -> Result<(), DatasetError> {
    if !t.is_finite() || t < 0.0 || !(1000.0 * t).is_finite() {
        return Err(ctx.err(
            field(),
            format!("`t` is {t}: session trees need a finite start >= 0 (seconds)"),
        ));
    }
    Ok(())
}

/// Builds the session tree of one trace.
pub fn build(trace: &ParsedTrace, opts: &TreeOptions) -> Result<SessionTree, DatasetError> {
    let ctx = Ctx { trace };
    // The importer substitutes a non-finite top-level `t`; aiperf refuses it, and so does the tree.
    if let Some(w) = trace
        .warnings
        .iter()
        .find(|w| w.kind == WarningKind::InvalidTime)
    {
        return Err(DatasetError::Invalid {
            location: w.location.clone(),
            message: format!("{}; session trees need a finite start >= 0", w.message),
        });
    }
    for r in &trace.requests {
        check_t(&ctx, || format!("requests[{}].t", r.index), r.t)?;
    }
    let mut counts = TreeCounts::default();
    // Canonical nested starts.
    let mut inner_t: Vec<Vec<f64>> = Vec::with_capacity(trace.subagent_entries.len());
    for s in &trace.subagent_entries {
        let path = || format!("requests[{}]", s.index);
        check_t(&ctx, || format!("{}.t", path()), s.t)?;
        if s.agent_id.is_none() {
            return Err(ctx.err(
                format!("{}.agent_id", path()),
                "missing field `agent_id`, required on a subagent entry to name its streams",
            ));
        }
        let mut ts = Vec::with_capacity(s.requests.len());
        for r in &s.requests {
            let field = || format!("{}.requests[{}].t", path(), r.index);
            check_t(&ctx, field, r.t)?;
            let t = match opts.basis {
                NestedBasis::Relative => s.t + r.t,
                NestedBasis::Absolute if r.t < s.t - EPS => {
                    return Err(ctx.err(
                        field(),
                        format!(
                            "starts at {} s, before its subagent's marker at {} s: under the absolute \
                             nested-timestamp basis it cannot be placed on the root clock (a corpus with \
                             marker-relative nested times needs the relative basis)",
                            r.t, s.t
                        ),
                    ))
                }
                NestedBasis::Absolute => {
                    if r.t < s.t {
                        counts.clamped_requests += 1;
                    }
                    r.t.max(s.t)
                }
            };
            check_t(&ctx, field, t)?;
            ts.push(t);
        }
        inner_t.push(ts);
    }
    Builder {
        trace,
        opts,
        inner_t,
        counts,
    }
    .run(&ctx)
}

struct Builder<'a> {
    trace: &'a ParsedTrace,
    opts: &'a TreeOptions,
    inner_t: Vec<Vec<f64>>,
    counts: TreeCounts,
}

/// One planned child stream before turns exist.
struct Plan<'a> {
    id: String,
    kind: StreamKind,
    class: Option<ChainClass>,
    reqs: Vec<Src<'a>>,
    init: (u32, u32),
    /// Subagent entry position (for stamps and scope), and chain index within it.
    entry: Option<(usize, usize)>,
    /// Fork request index (layer-local) of a worker chain.
    fork_index: Option<u32>,
}

impl<'a> Builder<'a> {
    fn run(mut self, ctx: &Ctx<'_>) -> Result<SessionTree, DatasetError> {
        let trace = self.trace;
        let p = self.opts.chains;
        let top: Vec<Src<'a>> = trace
            .requests
            .iter()
            .map(|r| Src {
                req: r,
                t: r.t,
                outer: r.index,
                inner: None,
            })
            .collect();
        // Root and flat workers.
        let (root_reqs, flat) = self.split_root(&top, &p);
        // Subagent chains.
        let mut sub_plans: Vec<Vec<Plan<'a>>> = Vec::new();
        for (si, s) in trace.subagent_entries.iter().enumerate() {
            sub_plans.push(self.subagent_plans(si, s, &p));
        }
        // Dropped subagents and spawn turns.
        let (spawn_of, dropped) = spawn_turns(trace, &root_reqs, ctx)?;
        self.count_plans(&sub_plans, &spawn_of, &flat);
        let joins = Joins::new(&root_reqs);
        let mut f = Forest::new(trace, &root_reqs);
        // Subagent branches: entries grouped by (spawn, join) in first-appearance order.
        self.add_subagent_branches(&mut f, sub_plans, &spawn_of, &joins);
        // Flat branches.
        f.add_flat_branches(trace, flat, &root_reqs, &joins);
        let Forest {
            mut streams,
            stream_reqs,
            stream_entry,
            branches,
        } = f;
        // Turns.
        for (st, reqs) in stream_reqs.iter().enumerate() {
            let cap = match streams[st].kind {
                StreamKind::Subagent => None,
                _ => self.opts.max_osl,
            };
            streams[st].turns = turns_of(reqs, cap);
        }
        for (b, br) in branches.iter().enumerate() {
            streams[0].turns[br.spawn_turn].spawns.push(b);
            if let Some(j) = br.join_turn {
                streams[0].turns[j].joins.push(b);
            }
        }
        stamp_prefixes(&mut streams, &stream_reqs, &stream_entry);
        self.counts.empty_hash_requests = stream_reqs
            .iter()
            .flatten()
            .filter(|r| r.req.hash_ids.is_empty())
            .count();
        install_predecessors(&mut streams);
        Ok(SessionTree {
            trace_id: trace.id.clone(),
            streams,
            branches,
            dropped_subagents: dropped,
            counts: self.counts,
        })
    }

    /// The root's requests and the flat worker chains split off them (`--split-chains`).
    fn split_root(&mut self, top: &[Src<'a>], p: &ChainParams) -> (Vec<Src<'a>>, Vec<Plan<'a>>) {
        let trace = self.trace;
        let mut flat: Vec<Plan<'a>> = Vec::new();
        let root_reqs: Vec<Src<'a>> = if self.opts.split_chains && top.len() > 1 {
            let reqs: Vec<Req<'_>> = top.iter().map(Src::chain_req).collect();
            let sp = split_layer(&reqs, p, true);
            if let Some(d) = &sp.detection {
                self.counts.seams += d.seams_merged;
            }
            let base_first = first_hashes(top, &sp.detected_main);
            for (n, c) in sp.chains.iter().enumerate().skip(1) {
                let class = sp.classes[n].expect("workers are classified");
                let first = top[c[0]].req.hash_ids.as_slice();
                flat.push(Plan {
                    id: format!("{}::{}", trace.id, class.suffix(n - 1)),
                    kind: StreamKind::Flat,
                    class: Some(class),
                    reqs: c.iter().map(|&i| top[i]).collect(),
                    init: chain_init_tokens(
                        trace.tool_tokens,
                        trace.system_tokens,
                        trace.block_size,
                        base_first,
                        first,
                    ),
                    entry: None,
                    fork_index: sp.fork_index[n],
                });
            }
            sp.chains[0].iter().map(|&i| top[i]).collect()
        } else {
            top.to_vec()
        };
        (root_reqs, flat)
    }

    /// Counts the chain classes of the subagents kept and of the flat workers, and the subagents
    /// without requests.
    fn count_plans(
        &mut self,
        sub_plans: &[Vec<Plan<'a>>],
        spawn_of: &[Option<usize>],
        flat: &[Plan<'a>],
    ) {
        for (plans, sp) in sub_plans.iter().zip(spawn_of) {
            if sp.is_some() {
                for pl in plans {
                    self.count_class(pl.class);
                }
                if plans.iter().all(|pl| pl.reqs.is_empty()) {
                    self.counts.empty_subagents += 1;
                }
            }
        }
        for pl in flat {
            self.count_class(pl.class);
        }
    }

    /// One branch per (spawn, join) of the subagent entries kept, with a stream per chain.
    fn add_subagent_branches(
        &self,
        f: &mut Forest<'a>,
        sub_plans: Vec<Vec<Plan<'a>>>,
        spawn_of: &[Option<usize>],
        joins: &Joins<'_, 'a>,
    ) {
        let trace = self.trace;
        let mut groups: Vec<((usize, Option<usize>), usize)> = Vec::new();
        for (si, plans) in sub_plans.into_iter().enumerate() {
            let Some(spawn) = spawn_of[si] else { continue };
            let s = &trace.subagent_entries[si];
            let end = self.subagent_end(si);
            let join = joins.after(s.index, end);
            let b = match groups.iter().find(|(k, _)| *k == (spawn, join)) {
                Some(&(_, b)) => {
                    let br = &mut f.branches[b];
                    br.start_timestamp_ms = br.start_timestamp_ms.min(1000.0 * s.t);
                    b
                }
                None => {
                    f.branches.push(Branch {
                        id: format!("{}:spawn:{}", trace.id, agent(s)),
                        children: Vec::new(),
                        spawn_turn: spawn,
                        join_turn: join,
                        start_timestamp_ms: 1000.0 * s.t,
                    });
                    groups.push(((spawn, join), f.branches.len() - 1));
                    f.branches.len() - 1
                }
            };
            let first_stream = f.streams.len();
            for pl in plans {
                let fork_source = match pl.entry {
                    Some((_, 0)) => Some((0, spawn)),
                    _ => pl.fork_index.and_then(|fi| {
                        (first_stream..f.streams.len()).find_map(|st| {
                            f.stream_reqs[st]
                                .iter()
                                .position(|r| r.inner == Some(fi))
                                .map(|k| (st, k))
                        })
                    }),
                };
                f.branches[b].children.push(f.streams.len());
                let scope = format!("{}::sa:{}", trace.id, agent(s));
                f.streams.push(child_stream(&pl, b, scope, fork_source));
                f.stream_reqs.push(pl.reqs);
                f.stream_entry.push(pl.entry);
            }
        }
    }

    fn count_class(&mut self, class: Option<ChainClass>) {
        match class {
            Some(ChainClass::Aux) => self.counts.aux += 1,
            Some(ChainClass::Reduction) => {
                self.counts.aux += 1;
                self.counts.reductions += 1
            }
            Some(ChainClass::WorkerGroup { .. }) => self.counts.worker_group += 1,
            _ => {}
        }
    }

    /// aiperf's `_sa_end_seconds` on canonical nested starts.
    fn subagent_end(&self, si: usize) -> f64 {
        let s = &self.trace.subagent_entries[si];
        if let Some(d) = s.duration_ms {
            let secs = d / 1000.0;
            return s.t
                + if secs.is_finite() && secs >= 0.0 {
                    secs
                } else {
                    0.0
                };
        }
        s.requests
            .iter()
            .zip(&self.inner_t[si])
            .map(|(r, &t)| chain::request_end(t, r.recorded_api_time))
            .reduce(f64::max)
            .unwrap_or(s.t)
    }

    fn subagent_plans(
        &mut self,
        si: usize,
        s: &'a ParsedSubagent,
        p: &ChainParams,
    ) -> Vec<Plan<'a>> {
        let trace = self.trace;
        let srcs: Vec<Src<'a>> = s
            .requests
            .iter()
            .zip(&self.inner_t[si])
            .map(|(r, &t)| Src {
                req: r,
                t,
                outer: s.index,
                inner: Some(r.index),
            })
            .collect();
        let base = format!("{}::sa:{}", trace.id, agent(s));
        if !self.opts.split_chains || srcs.is_empty() {
            let mut all = srcs.clone();
            all.sort_by(|a, b| chain::fcmp(a.t, b.t).then(a.inner.cmp(&b.inner)));
            return vec![Plan {
                id: base,
                kind: StreamKind::Subagent,
                class: None,
                reqs: all,
                init: (s.tool_tokens, s.system_tokens),
                entry: Some((si, 0)),
                fork_index: None,
            }];
        }
        let reqs: Vec<Req<'_>> = srcs.iter().map(Src::chain_req).collect();
        let sp = split_layer(&reqs, p, false);
        let base_first = first_hashes(&srcs, &sp.detected_main);
        let mut plans = Vec::new();
        for (ci, c) in sp.chains.iter().enumerate() {
            let chain_reqs: Vec<Src<'a>> = c.iter().map(|&i| srcs[i]).collect();
            let (id, init) = if ci == 0 {
                (base.clone(), (s.tool_tokens, s.system_tokens))
            } else {
                let first = chain_reqs
                    .iter()
                    .map(|r| r.req.hash_ids.as_slice())
                    .find(|h| !h.is_empty())
                    .unwrap_or(&[]);
                let class = sp.classes[ci].expect("workers are classified");
                (
                    format!("{base}:{}", class.suffix(ci - 1)),
                    chain_init_tokens(
                        s.tool_tokens,
                        s.system_tokens,
                        trace.block_size,
                        base_first,
                        first,
                    ),
                )
            };
            plans.push(Plan {
                id,
                kind: StreamKind::Subagent,
                class: sp.classes[ci],
                reqs: chain_reqs,
                init,
                entry: Some((si, ci)),
                fork_index: sp.fork_index[ci],
            });
        }
        plans
    }
}

/// The spawn turn (on the root) of each subagent entry, `None` for one before any root request
/// (dropped, by agent id); an agent id used by two kept entries is an error.
fn spawn_turns(
    trace: &ParsedTrace,
    root_reqs: &[Src<'_>],
    ctx: &Ctx<'_>,
) -> Result<(Vec<Option<usize>>, Vec<String>), DatasetError> {
    let mut spawn_of: Vec<Option<usize>> = Vec::new();
    let mut dropped = Vec::new();
    for s in &trace.subagent_entries {
        let spawn = root_reqs
            .iter()
            .enumerate()
            .filter(|(_, r)| r.outer < s.index)
            .map(|(k, _)| k)
            .max();
        if spawn.is_none() {
            dropped.push(agent(s).to_owned());
        }
        spawn_of.push(spawn);
    }
    let mut seen: HashMap<&str, u32> = HashMap::new();
    for (s, sp) in trace.subagent_entries.iter().zip(&spawn_of) {
        if sp.is_none() {
            continue;
        }
        if let Some(first) = seen.insert(agent(s), s.index) {
            return Err(ctx.err(
                format!("requests[{}].agent_id", s.index),
                format!(
                    "agent_id {:?} is also the agent_id of requests[{first}]; the subagents of a trace \
                     need distinct agent_ids (they name its streams)",
                    agent(s)
                ),
            ));
        }
    }
    Ok((spawn_of, dropped))
}

/// Where a branch joins the root: the first root request (in index order) after `after` that
/// starts once the branch ended.
struct Joins<'r, 'a> {
    root_reqs: &'r [Src<'a>],
    by_index: Vec<usize>,
}

impl<'r, 'a> Joins<'r, 'a> {
    fn new(root_reqs: &'r [Src<'a>]) -> Self {
        let mut by_index: Vec<usize> = (0..root_reqs.len()).collect();
        by_index.sort_by_key(|&k| root_reqs[k].outer);
        Joins {
            root_reqs,
            by_index,
        }
    }

    fn after(&self, after: u32, end: f64) -> Option<usize> {
        let root_reqs = self.root_reqs;
        self.by_index
            .iter()
            .copied()
            .find(|&k| root_reqs[k].outer > after && root_reqs[k].t + EPS >= end)
    }
}

/// The streams of a tree as they are added (the root first), with their requests, subagent entry
/// positions and branches.
struct Forest<'a> {
    streams: Vec<Stream>,
    stream_reqs: Vec<Vec<Src<'a>>>,
    stream_entry: Vec<Option<(usize, usize)>>,
    branches: Vec<Branch>,
}

impl<'a> Forest<'a> {
    fn new(trace: &ParsedTrace, root_reqs: &[Src<'a>]) -> Self {
        Forest {
            streams: vec![Stream {
                id: trace.id.clone(),
                kind: StreamKind::Main,
                class: None,
                depth: 0,
                parent: None,
                branch: None,
                replay_scope: trace.id.clone(),
                init_tool_tokens: trace.tool_tokens,
                init_system_tokens: trace.system_tokens,
                fork_source: None,
                turns: Vec::new(),
            }],
            stream_reqs: vec![root_reqs.to_vec()],
            stream_entry: vec![None],
            branches: Vec::new(),
        }
    }

    /// One branch per (spawn, join) of the flat worker chains, with a stream per chain.
    fn add_flat_branches(
        &mut self,
        trace: &ParsedTrace,
        flat: Vec<Plan<'a>>,
        root_reqs: &[Src<'a>],
        joins: &Joins<'_, 'a>,
    ) {
        let mut flat_groups: Vec<((usize, Option<usize>), usize)> = Vec::new();
        let first_flat = self.streams.len();
        for (n, pl) in flat.into_iter().enumerate() {
            let first = pl.reqs[0];
            let spawn = root_reqs
                .iter()
                .enumerate()
                .filter(|(_, r)| r.outer < first.outer)
                .map(|(k, _)| k)
                .max()
                .unwrap_or(0);
            let end = pl
                .reqs
                .iter()
                .map(|r| chain::request_end(r.t, r.req.recorded_api_time))
                .fold(f64::NEG_INFINITY, f64::max);
            let join = joins.after(first.outer, end);
            let b = match flat_groups.iter().find(|(k, _)| *k == (spawn, join)) {
                Some(&(_, b)) => {
                    let br = &mut self.branches[b];
                    br.start_timestamp_ms = br.start_timestamp_ms.min(1000.0 * first.t);
                    b
                }
                None => {
                    self.branches.push(Branch {
                        id: format!("{}:flatspawn:{n}", trace.id),
                        children: Vec::new(),
                        spawn_turn: spawn,
                        join_turn: join,
                        start_timestamp_ms: 1000.0 * first.t,
                    });
                    flat_groups.push(((spawn, join), self.branches.len() - 1));
                    self.branches.len() - 1
                }
            };
            let fork_source = pl.fork_index.and_then(|fi| {
                std::iter::once(0)
                    .chain(first_flat..self.streams.len())
                    .find_map(|st| {
                        self.stream_reqs[st]
                            .iter()
                            .position(|r| r.outer == fi)
                            .map(|k| (st, k))
                    })
            });
            self.branches[b].children.push(self.streams.len());
            self.streams
                .push(child_stream(&pl, b, trace.id.clone(), fork_source));
            self.stream_reqs.push(pl.reqs);
            self.stream_entry.push(None);
        }
    }
}

fn agent(s: &ParsedSubagent) -> &str {
    s.agent_id.as_deref().unwrap_or_default()
}

/// The first non-empty hash list of a detected main chain.
fn first_hashes<'a>(srcs: &[Src<'a>], main: &[usize]) -> &'a [u32] {
    main.iter()
        .map(|&i| srcs[i].req.hash_ids.as_slice())
        .find(|h| !h.is_empty())
        .unwrap_or(&[])
}

fn child_stream(
    pl: &Plan<'_>,
    branch: usize,
    scope: String,
    fork_source: Option<(usize, usize)>,
) -> Stream {
    Stream {
        id: pl.id.clone(),
        kind: pl.kind,
        class: pl.class,
        depth: 1,
        parent: Some(0),
        branch: Some(branch),
        replay_scope: scope,
        init_tool_tokens: pl.init.0,
        init_system_tokens: pl.init.1,
        fork_source,
        turns: Vec::new(),
    }
}

/// `max(0, (1000·t_k − 1000·t_{k−1}) − 1000·api_{k−1})`; a null or non-finite api counts 0, a
/// negative one is used as is (aiperf's quirk).
fn end_to_start_delay(prev: &Src<'_>, cur: &Src<'_>) -> f64 {
    let start_to_start = 1000.0 * cur.t - 1000.0 * prev.t;
    let api = prev
        .req
        .recorded_api_time
        .filter(|a| a.is_finite())
        .map_or(0.0, |a| a * 1000.0);
    (start_to_start - api).max(0.0)
}

fn input_kind(r: &ParsedRequest, prev: Option<&ParsedRequest>) -> Option<InputKind> {
    if r.input_types.iter().any(|t| t == "tool_result") {
        return Some(InputKind::ToolResult);
    }
    if !r.input_types.is_empty() {
        return Some(InputKind::UserInput);
    }
    match prev.map(|p| p.stop.as_str()) {
        Some("tool_use") => Some(InputKind::ToolResult),
        Some(s) if !s.is_empty() => Some(InputKind::UserInput),
        _ => None,
    }
}

fn turns_of(reqs: &[Src<'_>], max_osl: Option<u32>) -> Vec<TreeTurn> {
    reqs.iter()
        .enumerate()
        .map(|(k, r)| {
            let prev = k.checked_sub(1).map(|j| &reqs[j]);
            let delay = prev.map(|p| end_to_start_delay(p, r));
            let think = prev.map(|p| match r.req.recorded_think_time {
                Some(tt) => (1000.0 * tt).max(0.0),
                None => end_to_start_delay(p, r),
            });
            let out = max_osl.map_or(r.req.output, |m| r.req.output.min(m));
            TreeTurn {
                ts_ms: 1000.0 * r.t,
                delay_ms: delay,
                delay_ms_think_time_only: think,
                api_time_ms: r
                    .req
                    .recorded_api_time
                    .filter(|a| a.is_finite())
                    .map(|a| a.max(0.0) * 1000.0),
                max_tokens: out.max(1),
                prefix_hit_blocks: 0,
                prefix_total_blocks: r.req.hash_ids.len() as u32,
                source_outer_idx: r.outer,
                source_inner_idx: r.inner,
                input_kind: input_kind(r.req, prev.map(|p| p.req)),
                spawns: Vec::new(),
                joins: Vec::new(),
                replay_predecessors: Vec::new(),
            }
        })
        .collect()
}

/// One seen-set per trace, walked in `(t, outer index, chain, k)` order (root and flat turns key
/// `(t, outer, 0, 0)`); `hit` = leading hash ids already seen.
fn stamp_prefixes(
    streams: &mut [Stream],
    stream_reqs: &[Vec<Src<'_>>],
    stream_entry: &[Option<(usize, usize)>],
) {
    let mut keys: Vec<(f64, u32, usize, usize, usize, usize)> = Vec::new();
    for (st, reqs) in stream_reqs.iter().enumerate() {
        for (k, r) in reqs.iter().enumerate() {
            let key = match stream_entry[st] {
                Some((_, ci)) => (r.t, r.outer, ci, k),
                None => (r.t, r.outer, 0, 0),
            };
            keys.push((key.0, key.1, key.2, key.3, st, k));
        }
    }
    keys.sort_by(|a, b| {
        chain::fcmp(a.0, b.0)
            .then(a.1.cmp(&b.1))
            .then(a.2.cmp(&b.2))
            .then(a.3.cmp(&b.3))
    });
    let mut seen: std::collections::HashSet<u32, std::hash::BuildHasherDefault<IdHasher>> =
        Default::default();
    for &(_, _, _, _, st, k) in &keys {
        let h = &stream_reqs[st][k].req.hash_ids;
        let hit = h.iter().take_while(|id| seen.contains(*id)).count();
        // The leading `hit` ids are in the set already.
        seen.extend(h[hit..].iter().copied());
        streams[st].turns[k].prefix_hit_blocks = hit as u32;
    }
}

/// A hasher for hash ids (u32 block ids, not attacker-chosen): one multiply instead of SipHash,
/// which made stamping a long-context corpus the bulk of building its trees.
#[derive(Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.0 = (u64::from(i) ^ self.0.rotate_left(5)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// Replay-barrier predecessors (aiperf's `infer_cross_stream_predecessors`, per scope): for a turn
/// starting at `s`, on every other stream of its scope the latest interval `[start, start + api]`
/// with `start < s` and `end <= s` (by `(end, start, key)`), minus picks that ended before another
/// pick started; sorted by (conversation id, turn).
fn install_predecessors(streams: &mut [Stream]) {
    let n = streams.len();
    // (stream, turn, start, end) per stream.
    let intervals: Vec<Vec<(f64, f64)>> = streams
        .iter()
        .map(|s| {
            s.turns
                .iter()
                .map(|t| (t.ts_ms, t.ts_ms + t.api_time_ms.unwrap_or(0.0)))
                .collect()
        })
        .collect();
    let key_cmp = |a: (usize, usize), b: (usize, usize)| {
        streams[a.0].id.cmp(&streams[b.0].id).then(a.1.cmp(&b.1))
    };
    let mut all: Vec<Vec<Vec<(usize, usize)>>> = Vec::with_capacity(n);
    for st in 0..n {
        let mut per_turn = Vec::with_capacity(intervals[st].len());
        for &(s, _) in &intervals[st] {
            let mut frontier: Vec<(usize, usize, f64, f64)> = Vec::new();
            for other in 0..n {
                if other == st || streams[other].replay_scope != streams[st].replay_scope {
                    continue;
                }
                let mut best: Option<(usize, f64, f64)> = None;
                for (k, &(a, e)) in intervals[other].iter().enumerate() {
                    if !(a < s && e <= s) {
                        continue;
                    }
                    let better = match best {
                        None => true,
                        Some((bk, ba, be)) => chain::fcmp(e, be)
                            .then(chain::fcmp(a, ba))
                            .then(key_cmp((other, k), (other, bk)))
                            .is_gt(),
                    };
                    if better {
                        best = Some((k, a, e));
                    }
                }
                if let Some((k, a, e)) = best {
                    frontier.push((other, k, a, e));
                }
            }
            let mut preds: Vec<(usize, usize)> = frontier
                .iter()
                .enumerate()
                .filter(|&(i, c)| {
                    !frontier
                        .iter()
                        .enumerate()
                        .any(|(j, l)| j != i && c.2 < l.2 && c.3 <= l.2)
                })
                .map(|(_, c)| (c.0, c.1))
                .collect();
            preds.sort_by(|&a, &b| key_cmp(a, b));
            per_turn.push(preds);
        }
        all.push(per_turn);
    }
    for (st, per_turn) in all.into_iter().enumerate() {
        for (k, preds) in per_turn.into_iter().enumerate() {
            streams[st].turns[k].replay_predecessors = preds;
        }
    }
}

/// The topology of a tree entry, kept in its import report ([`crate::dataset::cache::ImportReport::trees`]; built and read by [`corpus`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TreeTopology {
    /// The nested-timestamp basis the trees were built with (the inferred one under `auto`).
    pub basis: NestedBasis,
    /// One tree per trace of the dataset, in dataset order.
    pub trees: Vec<SessionTree>,
}

#[cfg(test)]
mod tests;
