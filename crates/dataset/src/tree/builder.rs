//! Building a [`SessionTree`] from a parsed trace: the streams of each layer (main, subagent and
//! flat worker chains), their branches, spawns and joins ([`build`]).

use super::*;

/// A request with its canonical start and position.
#[derive(Debug, Clone, Copy)]
pub(super) struct Src<'a> {
    pub(super) req: &'a ParsedRequest,
    pub(super) t: f64,
    pub(super) outer: u32,
    pub(super) inner: Option<u32>,
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
pub(super) struct Split {
    /// Positions in the layer's slice, per chain; chain 0 is the main chain.
    pub chains: Vec<Vec<usize>>,
    pub(crate) classes: Vec<Option<ChainClass>>,
    /// Per chain: the index of the request it forked from.
    pub(crate) fork_index: Vec<Option<u32>>,
    pub detection: Option<Detection>,
    /// Positions of the detected main chain (preamble excluded): the classification yardstick.
    pub(crate) detected_main: Vec<usize>,
}

/// Splits a layer: preamble, detection, classification. With `top`, the layer keeps its file order
/// when detection finds no worker (aiperf returns early); a subagent layer is always in chain order.
pub(super) fn split_layer(reqs: &[Req<'_>], params: &ChainParams, top: bool) -> Split {
    let by_t = |v: &mut Vec<usize>| {
        v.sort_by(|&a, &b| {
            chain::fcmp(reqs[a].t, reqs[b].t).then(reqs[a].index.cmp(&reqs[b].index))
        });
    };
    let pre = chain::preamble(reqs);
    let rest: Vec<usize> = (0..reqs.len()).filter(|&i| Some(i) != pre).collect();
    let sub: Vec<Req<'_>> = rest.iter().map(|&i| reqs[i]).collect();
    let detection = chain::detect(&sub, params);
    if detection.chains.is_empty() {
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
    let detected_main: Vec<usize> = detection.chains[detection.main_index]
        .requests
        .iter()
        .map(|&q| rest[q])
        .collect();
    if top && detection.worker_indices.is_empty() {
        return Split {
            chains: vec![(0..reqs.len()).collect()],
            classes: vec![None],
            fork_index: vec![None],
            detection: Some(detection),
            detected_main,
        };
    }
    let mut main = detected_main.clone();
    if let Some(pre_idx) = pre {
        main.push(pre_idx);
        by_t(&mut main);
    }
    let groups = chain::worker_groups(&sub, &detection, params);
    let mut chains = vec![main];
    let mut classes = vec![None];
    let mut fork_index = vec![None];
    for &ci in &detection.worker_indices {
        chains.push(
            detection.chains[ci]
                .requests
                .iter()
                .map(|&q| rest[q])
                .collect(),
        );
        classes.push(Some(chain::classify(&sub, &detection, ci, &groups, params)));
        fork_index.push(
            detection.chains[ci]
                .fork
                .as_ref()
                .and_then(|f| f.fork_index),
        );
    }
    Split {
        chains,
        classes,
        fork_index,
        detection: Some(detection),
        detected_main,
    }
}

/// aiperf's `_chain_init_tokens`: the declared tool/system tokens when the chain's first hash list
/// and the base's agree on the declared prefix blocks, else 0/0.
pub(super) fn chain_init_tokens(
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

pub(super) struct Ctx<'a> {
    pub(super) trace: &'a ParsedTrace,
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

pub(super) fn check_t(
    ctx: &Ctx<'_>,
    field: impl FnOnce() -> String,
    start: f64,
) -> Result<(), DatasetError> {
    if !start.is_finite() || start < 0.0 || !(1000.0 * start).is_finite() {
        return Err(ctx.err(
            field(),
            format!("`t` is {start}: session trees need a finite start >= 0 (seconds)"),
        ));
    }
    Ok(())
}

/// Builds the session tree of one trace.
pub fn build(trace: &ParsedTrace, opts: &TreeOptions) -> Result<SessionTree, DatasetError> {
    let ctx = Ctx { trace };
    // The importer substitutes a non-finite top-level `t`; aiperf refuses it, and so does the tree.
    if let Some(warning) = trace
        .warnings
        .iter()
        .find(|warning| warning.kind == WarningKind::InvalidTime)
    {
        return Err(DatasetError::Invalid {
            location: warning.location.clone(),
            message: format!(
                "{}; session trees need a finite start >= 0",
                warning.message
            ),
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
        let mut stamps = Vec::with_capacity(s.requests.len());
        for r in &s.requests {
            let field = || format!("{}.requests[{}].t", path(), r.index);
            check_t(&ctx, field, r.t)?;
            let start = match opts.basis {
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
            check_t(&ctx, field, start)?;
            stamps.push(start);
        }
        inner_t.push(stamps);
    }
    Builder {
        trace,
        opts,
        inner_t,
        counts,
    }
    .run(&ctx)
}

pub(super) struct Builder<'a> {
    pub(super) trace: &'a ParsedTrace,
    pub(super) opts: &'a TreeOptions,
    pub(super) inner_t: Vec<Vec<f64>>,
    pub(super) counts: TreeCounts,
}

/// One planned child stream before turns exist.
pub(super) struct Plan<'a> {
    pub(super) id: String,
    pub(super) kind: StreamKind,
    pub(super) class: Option<ChainClass>,
    pub(super) reqs: Vec<Src<'a>>,
    pub(super) init: (u32, u32),
    /// Subagent entry position (for stamps and scope), and chain index within it.
    pub(super) entry: Option<(usize, usize)>,
    /// Fork request index (layer-local) of a worker chain.
    pub(super) fork_index: Option<u32>,
}

impl<'a> Builder<'a> {
    fn run(mut self, ctx: &Ctx<'_>) -> Result<SessionTree, DatasetError> {
        let trace = self.trace;
        let params = self.opts.chains;
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
        let (root_reqs, flat) = self.split_root(&top, &params);
        // Subagent chains.
        let mut sub_plans: Vec<Vec<Plan<'a>>> = Vec::new();
        for (si, s) in trace.subagent_entries.iter().enumerate() {
            sub_plans.push(self.subagent_plans(si, s, &params));
        }
        // Dropped subagents and spawn turns.
        let (spawn_of, dropped) = spawn_turns(trace, &root_reqs, ctx)?;
        self.count_plans(&sub_plans, &spawn_of, &flat);
        let joins = Joins::new(&root_reqs);
        let mut forest = Forest::new(trace, &root_reqs);
        // Subagent branches: entries grouped by (spawn, join) in first-appearance order.
        self.add_subagent_branches(&mut forest, sub_plans, &spawn_of, &joins);
        // Flat branches.
        forest.add_flat_branches(trace, flat, &root_reqs, &joins);
        let Forest {
            mut streams,
            stream_reqs,
            stream_entry,
            branches,
        } = forest;
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
            if let Some(join) = br.join_turn {
                streams[0].turns[join].joins.push(b);
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
    fn split_root(
        &mut self,
        top: &[Src<'a>],
        params: &ChainParams,
    ) -> (Vec<Src<'a>>, Vec<Plan<'a>>) {
        let trace = self.trace;
        let mut flat: Vec<Plan<'a>> = Vec::new();
        let split = self.opts.split_chains && !trace.explicit_sessions;
        let root_reqs: Vec<Src<'a>> = if split && top.len() > 1 {
            let reqs: Vec<Req<'_>> = top.iter().map(Src::chain_req).collect();
            let split = split_layer(&reqs, params, true);
            if let Some(detection) = &split.detection {
                self.counts.seams += detection.seams_merged;
            }
            let base_first = first_hashes(top, &split.detected_main);
            for (n, c) in split.chains.iter().enumerate().skip(1) {
                let class = split.classes[n].expect("workers are classified");
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
                    fork_index: split.fork_index[n],
                });
            }
            split.chains[0].iter().map(|&i| top[i]).collect()
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
        forest: &mut Forest<'a>,
        sub_plans: Vec<Vec<Plan<'a>>>,
        spawn_of: &[Option<usize>],
        joins: &Joins<'_, 'a>,
    ) {
        let trace = self.trace;
        let mut groups: Vec<((usize, Option<usize>), usize)> = Vec::new();
        for (si, plans) in sub_plans.into_iter().enumerate() {
            let Some(spawn) = spawn_of[si] else { continue };
            let entry = &trace.subagent_entries[si];
            let join = match entry.join {
                SubagentJoin::Inferred => joins.after(entry.index, self.subagent_end(si)),
                SubagentJoin::Background => None,
                SubagentJoin::At(outer) => joins.root_reqs.iter().position(|r| r.outer == outer),
            };
            let branch_idx = match groups.iter().find(|(k, _)| *k == (spawn, join)) {
                Some(&(_, branch_idx)) => {
                    let branch = &mut forest.branches[branch_idx];
                    branch.start_timestamp_ms = branch.start_timestamp_ms.min(1000.0 * entry.t);
                    branch_idx
                }
                None => {
                    forest.branches.push(Branch {
                        id: format!("{}:spawn:{}", trace.id, agent(entry)),
                        children: Vec::new(),
                        spawn_turn: spawn,
                        join_turn: join,
                        start_timestamp_ms: 1000.0 * entry.t,
                    });
                    groups.push(((spawn, join), forest.branches.len() - 1));
                    forest.branches.len() - 1
                }
            };
            let first_stream = forest.streams.len();
            for pl in plans {
                let fork_source = match pl.entry {
                    Some((_, 0)) => Some((0, spawn)),
                    _ => pl.fork_index.and_then(|fi| {
                        (first_stream..forest.streams.len()).find_map(|st| {
                            forest.stream_reqs[st]
                                .iter()
                                .position(|r| r.inner == Some(fi))
                                .map(|k| (st, k))
                        })
                    }),
                };
                forest.branches[branch_idx]
                    .children
                    .push(forest.streams.len());
                let scope = format!("{}::sa:{}", trace.id, agent(entry));
                forest
                    .streams
                    .push(child_stream(&pl, branch_idx, scope, fork_source));
                forest.stream_reqs.push(pl.reqs);
                forest.stream_entry.push(pl.entry);
            }
        }
    }

    fn count_class(&mut self, class: Option<ChainClass>) {
        match class {
            Some(ChainClass::Aux) => self.counts.aux += 1,
            Some(ChainClass::Reduction) => {
                self.counts.aux += 1;
                self.counts.reductions += 1;
            }
            Some(ChainClass::WorkerGroup { .. }) => self.counts.worker_group += 1,
            _ => {}
        }
    }

    /// aiperf's `_sa_end_seconds` on canonical nested starts.
    fn subagent_end(&self, subagent_index: usize) -> f64 {
        let entry = &self.trace.subagent_entries[subagent_index];
        if let Some(duration) = entry.duration_ms {
            let secs = duration / 1000.0;
            return entry.t
                + if secs.is_finite() && secs >= 0.0 {
                    secs
                } else {
                    0.0
                };
        }
        entry
            .requests
            .iter()
            .zip(&self.inner_t[subagent_index])
            .map(|(r, &t)| chain::request_end(t, r.recorded_api_time))
            .reduce(f64::max)
            .unwrap_or(entry.t)
    }

    fn subagent_plans(
        &mut self,
        subagent_index: usize,
        subagent: &'a ParsedSubagent,
        params: &ChainParams,
    ) -> Vec<Plan<'a>> {
        let trace = self.trace;
        let srcs: Vec<Src<'a>> = subagent
            .requests
            .iter()
            .zip(&self.inner_t[subagent_index])
            .map(|(r, &t)| Src {
                req: r,
                t,
                outer: subagent.index,
                inner: Some(r.index),
            })
            .collect();
        let base = format!("{}::sa:{}", trace.id, agent(subagent));
        if !self.opts.split_chains || trace.explicit_sessions || srcs.is_empty() {
            let mut all = srcs.clone();
            all.sort_by(|a, b| chain::fcmp(a.t, b.t).then(a.inner.cmp(&b.inner)));
            return vec![Plan {
                id: base,
                kind: StreamKind::Subagent,
                class: None,
                reqs: all,
                init: (subagent.tool_tokens, subagent.system_tokens),
                entry: Some((subagent_index, 0)),
                fork_index: None,
            }];
        }
        let reqs: Vec<Req<'_>> = srcs.iter().map(Src::chain_req).collect();
        let split = split_layer(&reqs, params, false);
        let base_first = first_hashes(&srcs, &split.detected_main);
        let mut plans = Vec::new();
        for (ci, c) in split.chains.iter().enumerate() {
            let chain_reqs: Vec<Src<'a>> = c.iter().map(|&i| srcs[i]).collect();
            let (stream_id, init) = if ci == 0 {
                (base.clone(), (subagent.tool_tokens, subagent.system_tokens))
            } else {
                let first = chain_reqs
                    .iter()
                    .map(|r| r.req.hash_ids.as_slice())
                    .find(|h| !h.is_empty())
                    .unwrap_or(&[]);
                let class = split.classes[ci].expect("workers are classified");
                (
                    format!("{base}:{}", class.suffix(ci - 1)),
                    chain_init_tokens(
                        subagent.tool_tokens,
                        subagent.system_tokens,
                        trace.block_size,
                        base_first,
                        first,
                    ),
                )
            };
            plans.push(Plan {
                id: stream_id,
                kind: StreamKind::Subagent,
                class: split.classes[ci],
                reqs: chain_reqs,
                init,
                entry: Some((subagent_index, ci)),
                fork_index: split.fork_index[ci],
            });
        }
        plans
    }
}

/// The spawn turn (on the root) of each subagent entry, `None` for one before any root request
/// (dropped, by agent id); an agent id used by two kept entries is an error.
pub(super) fn spawn_turns(
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
pub(super) struct Joins<'r, 'a> {
    pub(super) root_reqs: &'r [Src<'a>],
    pub(super) by_index: Vec<usize>,
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
pub(super) struct Forest<'a> {
    pub(super) streams: Vec<Stream>,
    pub(super) stream_reqs: Vec<Vec<Src<'a>>>,
    pub(super) stream_entry: Vec<Option<(usize, usize)>>,
    pub(super) branches: Vec<Branch>,
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
            let branch_idx = match flat_groups.iter().find(|(k, _)| *k == (spawn, join)) {
                Some(&(_, branch_idx)) => {
                    let branch = &mut self.branches[branch_idx];
                    branch.start_timestamp_ms = branch.start_timestamp_ms.min(1000.0 * first.t);
                    branch_idx
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
            self.branches[branch_idx].children.push(self.streams.len());
            self.streams
                .push(child_stream(&pl, branch_idx, trace.id.clone(), fork_source));
            self.stream_reqs.push(pl.reqs);
            self.stream_entry.push(None);
        }
    }
}

pub(super) fn agent(subagent: &ParsedSubagent) -> &str {
    subagent.agent_id.as_deref().unwrap_or_default()
}

/// The first non-empty hash list of a detected main chain.
pub(super) fn first_hashes<'a>(srcs: &[Src<'a>], main: &[usize]) -> &'a [u32] {
    main.iter()
        .map(|&i| srcs[i].req.hash_ids.as_slice())
        .find(|h| !h.is_empty())
        .unwrap_or(&[])
}

pub(super) fn child_stream(
    plan: &Plan<'_>,
    branch: usize,
    scope: String,
    fork_source: Option<(usize, usize)>,
) -> Stream {
    Stream {
        id: plan.id.clone(),
        kind: plan.kind,
        class: plan.class,
        depth: 1,
        parent: Some(0),
        branch: Some(branch),
        replay_scope: scope,
        init_tool_tokens: plan.init.0,
        init_system_tokens: plan.init.1,
        fork_source,
        turns: Vec::new(),
    }
}

/// `max(0, (1000·t_k − 1000·t_{k−1}) − 1000·api_{k−1})`; a null or non-finite api counts 0, a
/// negative one is used as is (aiperf's quirk).
pub(super) fn end_to_start_delay(prev: &Src<'_>, cur: &Src<'_>) -> f64 {
    let start_to_start = 1000.0 * cur.t - 1000.0 * prev.t;
    let api = prev
        .req
        .recorded_api_time
        .filter(|a| a.is_finite())
        .map_or(0.0, |a| a * 1000.0);
    (start_to_start - api).max(0.0)
}

pub(super) fn input_kind(
    request: &ParsedRequest,
    prev: Option<&ParsedRequest>,
) -> Option<InputKind> {
    if request.input_types.iter().any(|t| t == "tool_result") {
        return Some(InputKind::ToolResult);
    }
    if !request.input_types.is_empty() {
        return Some(InputKind::UserInput);
    }
    match prev.map(|p| p.stop.as_str()) {
        Some("tool_use") => Some(InputKind::ToolResult),
        Some(s) if !s.is_empty() => Some(InputKind::UserInput),
        _ => None,
    }
}
