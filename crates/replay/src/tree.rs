//! Session trees as the scenario's planner sees them: a [`SessionTree`] of the dataset (streams,
//! turn starts, the root's branches) turned into the `agentx:scenario@0.2.0` `tree` record that
//! `start-tree` answers on. This is where the session-tree scheduler takes its lanes' start points
//! from: t*, the alive streams, their next and warm turns, offsets and warmup leads.

use std::collections::HashMap;

use agentx_dataset::tree::SessionTree;
use agentx_scenario::types_v2::{Branch, Tree, TreeStream};

/// The planner's view of a tree: every stream's turn starts (ms on the root clock) and the root's
/// branches with their children, spawn and join turns and recorded starts. Prompts never cross.
pub fn wit_tree(tree: &SessionTree) -> Tree {
    Tree {
        trace_id: tree.trace_id.clone(),
        streams: tree
            .streams
            .iter()
            .map(|s| TreeStream {
                conversation_id: s.id.clone(),
                turn_ts_ms: s.turns.iter().map(|x| x.ts_ms).collect(),
                unsendable: Vec::new(),
            })
            .collect(),
        branches: tree
            .branches
            .iter()
            .map(|b| Branch {
                branch_id: b.id.clone(),
                children: b.children.iter().map(|&c| c as u32).collect(),
                start_ms: Some(b.start_timestamp_ms),
                spawn_turn: Some(b.spawn_turn as u32),
                join_turn: b.join_turn.map(|j| j as u32),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use serde_json::Value;

    use super::*;
    use agentx_dataset::tree::corpus::{TreeCorpus, TreeOpen};
    use agentx_dataset::{Dataset, OpenOptions};
    use agentx_scenario::types_v2::TreeParams;
    use agentx_scenario::{Limits, ScenarioEngine};

    fn root() -> &'static Path {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
    }

    fn trees(corpus: &str) -> HashMap<String, SessionTree> {
        let cache = tempfile::tempdir().unwrap();
        let ds = Dataset::open_path(
            &root().join("fixtures").join(corpus),
            &OpenOptions {
                cache_dir: Some(cache.path().to_owned()),
                ..OpenOptions::default()
            },
        )
        .unwrap();
        TreeCorpus::open(
            &ds,
            &TreeOpen {
                cache_dir: Some(cache.path().to_owned()),
                ..TreeOpen::default()
            },
        )
        .unwrap()
        .trees
        .into_iter()
        .map(|t| (t.trace_id.clone(), t))
        .collect()
    }

    /// The fixture corpora parsed and built by the dataset side, planned by the real agentx-v1
    /// component through wasmtime: every lane of every golden run of aiperf 0.13 (two corpora, three
    /// seeds, four concurrencies, two ratio pairs) gets the same t*, alive streams, next and warm
    /// turns, offsets, waiting roots and join turns.
    #[test]
    fn the_corpora_through_the_component_start_where_aiperf_starts() {
        let engine = ScenarioEngine::new(Limits::default(), None).unwrap();
        let sc = engine
            .load(&root().join("guest-scenarios/dist/agentx-v1.wasm"), None)
            .unwrap();
        let mut inst = sc.instantiate().unwrap();
        let golden: Value = serde_json::from_str(
            &std::fs::read_to_string(root().join("fixtures/golden/v1_tstar.json")).unwrap(),
        )
        .unwrap();
        let cap = golden["system_idle_gap_cap_seconds"].as_f64().unwrap() * 1000.0;
        let corpora: HashMap<&str, HashMap<String, Tree>> = [
            ("subagents8", "traces-subagents-8.jsonl"),
            ("traces24", "traces-24.jsonl"),
        ]
        .into_iter()
        .map(|(name, file)| {
            (
                name,
                trees(file)
                    .iter()
                    .map(|(id, t)| (id.clone(), wit_tree(t)))
                    .collect(),
            )
        })
        .collect();
        let mut lanes = 0;
        for run in golden["runs"].as_array().unwrap() {
            let trees = &corpora[run["corpus"].as_str().unwrap()];
            let p = TreeParams {
                seed: run["seed"].as_u64().unwrap(),
                min_ratio: run["min_ratio"].as_f64().unwrap(),
                max_ratio: run["max_ratio"].as_f64().unwrap(),
                lead_cap_ms: cap,
            };
            for lane in run["lanes"].as_array().unwrap() {
                let l = lane["lane"].as_u64().unwrap() as u32;
                let trace = lane["trace_id"].as_str().unwrap();
                let what = format!("{} seed {} lane {l} ({trace})", run["corpus"], p.seed);
                let tree = &trees[trace];
                let st = inst.start_tree(p, l, tree).unwrap().unwrap();
                assert_eq!(st.t_star_ms, lane["t_star_ms"].as_f64(), "{what}: t*");
                let want = lane["states"].as_array().unwrap();
                assert_eq!(st.streams.len(), want.len(), "{what}: alive streams");
                for (g, w) in st.streams.iter().zip(want) {
                    let id = &tree.streams[g.index as usize].conversation_id;
                    assert_eq!(id, w["conversation_id"].as_str().unwrap(), "{what}");
                    assert_eq!(
                        u64::from(g.next_turn),
                        w["next_turn"].as_u64().unwrap(),
                        "{what} {id}"
                    );
                    assert_eq!(
                        g.warm_turn.map(u64::from),
                        w["warm_turn"].as_u64(),
                        "{what} {id}"
                    );
                    assert_eq!(g.offset_ms, w["offset_ms"].as_f64().unwrap(), "{what} {id}");
                    assert_eq!(
                        g.waiting,
                        w["waiting_on_children"].as_bool().unwrap(),
                        "{what} {id}"
                    );
                    assert_eq!(
                        g.join_turn.map(u64::from),
                        w["join_target_turn"].as_u64(),
                        "{what} {id}"
                    );
                }
                lanes += 1;
            }
        }
        assert!(lanes > 200, "{lanes} lanes");
    }
}

/// The start of every lane of a session-tree run, as `--dry-run --json` prints it and as the
/// session-tree scheduler will replay it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TreeLane {
    /// The lane's index, from 0.
    pub lane: u32,
    /// The tree's index in the corpus.
    #[serde(skip)]
    pub tree: usize,
    /// The base trace of the tree.
    pub trace_id: String,
    /// t* on the root's clock (ms); `None` for a lane started by the turn-index fallback.
    pub t_star_ms: Option<f64>,
    /// The tree's cache-bust marker (every stream of the tree carries it).
    pub marker: String,
    /// Trees of this base trace minted before this one.
    pub pass: u32,
    /// The tree's streams alive at t*.
    pub streams: Vec<TreeLaneStream>,
}

/// One alive stream of a lane's tree.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TreeLaneStream {
    /// The stream's index in its tree.
    #[serde(skip)]
    pub index: u32,
    /// The stream's conversation id in the corpus.
    pub conversation_id: String,
    /// The first turn profiling sends.
    pub next_turn: u32,
    /// The turn warmup sends to warm the cache, if any.
    pub warm_turn: Option<u32>,
    /// The stream's start on the root's clock (ms).
    pub offset_ms: f64,
    /// How long before t* the warm turn was recorded (capped): warmup fires it at the run's
    /// largest lead minus this.
    pub lead_ms: f64,
    /// The root waits for its children's join before `next_turn`.
    pub waiting: bool,
}

/// What planning a session-tree run needs.
#[derive(Debug, Clone)]
pub struct TreePlanParams {
    /// Lanes replayed at once (`--concurrency`).
    pub concurrency: u32,
    /// The run's seed, passed to the scenario's `start-tree`.
    pub seed: u64,
    /// The smallest start position of a lane, as a fraction of its tree (0 to 1).
    pub min_ratio: f64,
    /// The largest start position of a lane, as a fraction of its tree (0 to 1).
    pub max_ratio: f64,
    /// The system idle cap (ms): the largest warmup lead.
    pub lead_cap_ms: f64,
    /// Where the cache-bust marker goes in each request's messages.
    pub placement: agentx_scenario::types::Placement,
    /// The run's id, from which the scenario mints each lane's cache-bust marker.
    pub run_id: String,
}

/// The lanes of a session-tree run: roots drawn round-robin in corpus order (aiperf's sequential
/// sampler, wrapping past the pool), each lane's start from the scenario's `start-tree` with its
/// lane index; a tree that cannot start a lane is passed over (at most `concurrency + 2·pool`
/// draws, as aiperf). Markers count trees per base trace in mint order.
pub fn plan_lanes(
    trees: &[Tree],
    plan_params: &TreePlanParams,
    scenario: &mut agentx_scenario::ScenarioInstance,
) -> Result<PlannedLanes, agentx_scenario::ScenarioError> {
    let mut lanes = Vec::with_capacity(plan_params.concurrency as usize);
    if trees.is_empty() {
        return Ok(PlannedLanes {
            lanes,
            next_draw: 0,
        });
    }
    let params = agentx_scenario::types_v2::TreeParams {
        seed: plan_params.seed,
        min_ratio: plan_params.min_ratio,
        max_ratio: plan_params.max_ratio,
        lead_cap_ms: plan_params.lead_cap_ms,
    };
    let mut passes: HashMap<&str, u32> = HashMap::new();
    let attempts = plan_params.concurrency as usize + 2 * trees.len();
    let mut draw = 0usize;
    while lanes.len() < plan_params.concurrency as usize && draw < attempts {
        let tree = &trees[draw % trees.len()];
        draw += 1;
        let lane = lanes.len() as u32;
        let Some(start) = scenario.start_tree(params, lane, tree)? else {
            continue;
        };
        let pass = passes.entry(tree.trace_id.as_str()).or_insert(0);
        let marker = scenario.cache_bust_tree(
            plan_params.placement,
            &agentx_scenario::types_v2::TreeId {
                run_id: plan_params.run_id.clone(),
                pass: *pass,
                lane,
                trace_id: tree.trace_id.clone(),
            },
        )?;
        lanes.push(TreeLane {
            lane,
            tree: (draw - 1) % trees.len(),
            trace_id: tree.trace_id.clone(),
            t_star_ms: start.t_star_ms,
            marker: marker.text,
            pass: *pass,
            streams: start
                .streams
                .iter()
                .map(|s| TreeLaneStream {
                    index: s.index,
                    conversation_id: tree.streams[s.index as usize].conversation_id.clone(),
                    next_turn: s.next_turn,
                    warm_turn: s.warm_turn,
                    offset_ms: s.offset_ms,
                    lead_ms: s.lead_ms,
                    waiting: s.waiting,
                })
                .collect(),
        });
        *pass += 1;
    }
    Ok(PlannedLanes {
        lanes,
        next_draw: draw,
    })
}

/// The lanes of a session-tree run and where the sampler goes on from (recycled trees draw from
/// there, round-robin in corpus order).
#[derive(Debug, Clone)]
pub struct PlannedLanes {
    /// One entry per planned lane, in lane order.
    pub lanes: Vec<TreeLane>,
    /// The draw index the sampler of recycled trees starts from.
    pub next_draw: usize,
}

/// What every shard of a session-tree run takes from the whole plan, whichever lanes it replays:
/// the warmup's largest lead and profiling's T0 (so every shard's primers and first turns sit on
/// one timeline), and every trace's next marker pass (so a recycled tree never reuses a pass
/// another shard's planned lane holds).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Whole {
    /// The largest warmup lead of any alive stream with a warm turn (ms).
    pub(crate) max_lead_ms: f64,
    /// The smallest offset of any alive stream that does not wait for a join (ms; 0 for none).
    pub(crate) t0_ms: f64,
    /// Per trace id: the passes its planned lanes minted (the next recycled tree's pass).
    pub(crate) passes: HashMap<String, u32>,
}

impl Whole {
    /// Of the whole plan's lanes.
    pub fn of(lanes: &[TreeLane]) -> Whole {
        let max_lead_ms = lanes
            .iter()
            .flat_map(|l| l.streams.iter())
            .filter(|s| s.warm_turn.is_some())
            .map(|s| s.lead_ms)
            .fold(0.0f64, f64::max);
        let t0 = lanes
            .iter()
            .flat_map(|l| l.streams.iter())
            .filter(|s| !s.waiting)
            .map(|s| s.offset_ms)
            .fold(f64::INFINITY, f64::min);
        let mut passes: HashMap<String, u32> = HashMap::new();
        for l in lanes {
            let p = passes.entry(l.trace_id.clone()).or_insert(0);
            *p = (*p).max(l.pass + 1);
        }
        Whole {
            max_lead_ms,
            t0_ms: if t0.is_finite() { t0 } else { 0.0 },
            passes,
        }
    }
}

/// The shard that recycles each tree of the corpus (index `t`: tree `t`'s shard), for a run of
/// `count` shards whose whole plan is `lanes`. A tree a planned lane starts on belongs to that
/// lane's shard (`lane % count`; the lowest such lane when several do); every other tree is dealt
/// in corpus order to the shard owning the fewest so far (the lowest index on a tie). Each shard's
/// sampler walks the one-process sampler's round-robin sequence and takes only its own trees, so a
/// recycled tree runs on one shard only, and the trees (with their marker passes) the shards
/// recycle are, together, the one-process sequence split by owner.
pub fn tree_owners(lanes: &[TreeLane], trees: usize, count: u32) -> Vec<u32> {
    let count = count.max(1);
    let mut owner: Vec<Option<u32>> = vec![None; trees];
    let mut sorted: Vec<&TreeLane> = lanes.iter().collect();
    sorted.sort_by_key(|l| l.lane);
    let mut held = vec![0usize; count as usize];
    for l in sorted {
        if let Some(o @ None) = owner.get_mut(l.tree) {
            *o = Some(l.lane % count);
            held[(l.lane % count) as usize] += 1;
        }
    }
    owner
        .into_iter()
        .map(|o| match o {
            Some(s) => s,
            None => {
                let s = (0..count)
                    .min_by_key(|&s| (held[s as usize], s))
                    .expect("at least one shard");
                held[s as usize] += 1;
                s
            }
        })
        .collect()
}

/// The sampler of recycled trees: round-robin in corpus order from where planning left it, over the
/// trees this shard owns ([`tree_owners`]; every tree in a run in one process). Trees without root
/// turns are passed over.
#[derive(Debug, Clone)]
pub(crate) struct Sampler {
    next: usize,
    /// Per tree, whether this shard recycles it; `None`: every tree.
    mine: Option<Vec<bool>>,
}

impl Sampler {
    /// Shard `shard`'s sampler (`owners` from [`tree_owners`], `None` in one process) over
    /// `tree_count` trees, `usable` the trees with root turns. A shard that owns no usable tree
    /// (lanes far outnumber trees) samples every tree, as lanes then share trees anyway.
    pub(crate) fn new(
        next: usize,
        owners: Option<Vec<u32>>,
        shard: u32,
        tree_count: usize,
        usable: impl Fn(usize) -> bool,
    ) -> Sampler {
        let mine = owners.map(|o| o.iter().map(|&s| s == shard).collect::<Vec<bool>>());
        let mine = match mine {
            Some(m)
                if !(0..tree_count).any(|t| m.get(t).copied().unwrap_or(false) && usable(t)) =>
            {
                tracing::warn!(
                    "shard {shard} owns none of the corpus's {tree_count} trees (more lanes than trees): its lanes recycle trees of the whole corpus, which other shards may replay at the same time"
                );
                None
            }
            m => m,
        };
        Sampler { next, mine }
    }

    /// The next tree (of `tree_count`), if any is usable.
    pub(crate) fn next(
        &mut self,
        tree_count: usize,
        usable: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        for _ in 0..tree_count {
            let t = self.next % tree_count;
            self.next += 1;
            let mine = self
                .mine
                .as_ref()
                .is_none_or(|m| m.get(t).copied().unwrap_or(false));
            if mine && usable(t) {
                return Some(t);
            }
        }
        None
    }
}

#[cfg(test)]
mod shard_tests {
    use super::*;

    fn lane(lane: u32, tree: usize, pass: u32) -> TreeLane {
        TreeLane {
            lane,
            tree,
            trace_id: format!("t{tree}"),
            t_star_ms: Some(0.0),
            marker: format!("m{lane}"),
            pass,
            streams: vec![TreeLaneStream {
                index: 0,
                conversation_id: format!("t{tree}"),
                next_turn: 1,
                warm_turn: Some(0),
                offset_ms: 100.0 * f64::from(lane + 1),
                lead_ms: 50.0 * f64::from(lane),
                waiting: false,
            }],
        }
    }

    /// A planned tree stays with its lane's shard, the rest are dealt to the shard holding the
    /// fewest, and one shard owns everything.
    #[test]
    fn every_tree_has_one_owner_planned_trees_their_lanes_shard() {
        // Six lanes on trees 0..5 of a corpus of 11; three shards.
        let lanes: Vec<TreeLane> = (0..6).map(|l| lane(l, l as usize, 0)).collect();
        let o = tree_owners(&lanes, 11, 3);
        assert_eq!(o[..6], [0, 1, 2, 0, 1, 2]);
        assert_eq!(o[6..], [0, 1, 2, 0, 1]);
        assert_eq!(tree_owners(&lanes, 11, 1), vec![0; 11]);
        // Lanes outnumber trees: a tree on two shards' lanes belongs to its lowest lane's shard.
        let wrap: Vec<TreeLane> = (0..4).map(|l| lane(l, l as usize % 3, l / 3)).collect();
        assert_eq!(tree_owners(&wrap, 3, 2), vec![0, 1, 0]);
    }

    /// Each shard's sampler takes its own trees from the one-process round-robin sequence: merged
    /// by position, the shards' sequences are the one-process sequence, so the union of what they
    /// recycle is what one process recycles, and no tree is recycled by two shards.
    #[test]
    fn the_shards_recycled_sequences_are_the_one_process_sequence_split_by_owner() {
        let lanes: Vec<TreeLane> = (0..4).map(|l| lane(l, l as usize + 2, 0)).collect();
        let n = 9;
        // Tree 4 has no root turns: no sampler ever draws it.
        let usable = |t: usize| t != 4;
        let mut one = Sampler::new(6, None, 0, n, usable);
        let seq: Vec<usize> = (0..3 * (n - 1))
            .map(|_| one.next(n, usable).unwrap())
            .collect();
        assert_eq!(seq[..4], [6, 7, 8, 0]);
        for count in [2u32, 3] {
            let owners = tree_owners(&lanes, n, count);
            let mut union: Vec<usize> = Vec::new();
            for s in 0..count {
                let mut sh = Sampler::new(6, Some(owners.clone()), s, n, usable);
                let mine: Vec<usize> = seq.iter().copied().filter(|&t| owners[t] == s).collect();
                let got: Vec<usize> = (0..mine.len())
                    .map(|_| sh.next(n, usable).unwrap())
                    .collect();
                assert_eq!(got, mine, "shard {s} of {count}");
                assert!(got.iter().all(|&t| owners[t] == s));
                union.extend(got);
            }
            union.sort_unstable();
            let mut all = seq.clone();
            all.sort_unstable();
            assert_eq!(union, all, "{count} shards");
        }
        // A shard that owns no usable tree shares the whole corpus rather than idle its lanes.
        let owners = vec![0; n];
        let mut lone = Sampler::new(6, Some(owners), 1, n, usable);
        assert_eq!(lone.next(n, usable), Some(6));
    }

    #[test]
    fn the_whole_plan_sets_the_timeline_and_the_passes() {
        let lanes: Vec<TreeLane> = (0..4).map(|l| lane(l, l as usize % 3, l / 3)).collect();
        let w = Whole::of(&lanes);
        assert_eq!(w.max_lead_ms, 150.0);
        assert_eq!(w.t0_ms, 100.0);
        assert_eq!(w.passes["t0"], 2);
        assert_eq!(w.passes["t1"], 1);
        // A shard's lanes alone would give another lead and T0: every shard uses the whole's.
        let odd: Vec<TreeLane> = lanes.iter().filter(|l| l.lane % 2 == 1).cloned().collect();
        assert_ne!(Whole::of(&odd).t0_ms, w.t0_ms);
    }
}
