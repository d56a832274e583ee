//! Session trees as the scenario's planner sees them: a [`SessionTree`] of the dataset (streams,
//! turn starts, the root's branches) turned into the `agentx:scenario@0.2.0` `tree` record that
//! `start-tree` answers on. This is where the session-tree scheduler takes its lanes' start points
//! from: t*, the alive streams, their next and warm turns, offsets and warmup leads.

use std::collections::HashMap;

use crate::dataset::tree::SessionTree;
use crate::scenario::types_v2::{Branch, Tree, TreeStream};

/// The planner's view of a tree: every stream's turn starts (ms on the root clock) and the root's
/// branches with their children, spawn and join turns and recorded starts. Prompts never cross.
pub fn wit_tree(t: &SessionTree) -> Tree {
    Tree {
        trace_id: t.trace_id.clone(),
        streams: t
            .streams
            .iter()
            .map(|s| TreeStream {
                conversation_id: s.id.clone(),
                turn_ts_ms: s.turns.iter().map(|x| x.ts_ms).collect(),
                unsendable: Vec::new(),
            })
            .collect(),
        branches: t
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
    use crate::dataset::tree::corpus::{TreeCorpus, TreeOpen};
    use crate::dataset::{Dataset, OpenOptions};
    use crate::scenario::types_v2::TreeParams;
    use crate::scenario::{Limits, ScenarioEngine};

    fn root() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR"))
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
    pub lane: u32,
    /// The tree's index in the corpus.
    #[serde(skip)]
    pub tree: usize,
    pub trace_id: String,
    /// t* on the root's clock (ms); `None` for a lane started by the turn-index fallback.
    pub t_star_ms: Option<f64>,
    /// The tree's cache-bust marker (every stream of the tree carries it).
    pub marker: String,
    /// Trees of this base trace minted before this one.
    pub pass: u32,
    pub streams: Vec<TreeLaneStream>,
}

/// One alive stream of a lane's tree.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TreeLaneStream {
    /// The stream's index in its tree.
    #[serde(skip)]
    pub index: u32,
    pub conversation_id: String,
    pub next_turn: u32,
    pub warm_turn: Option<u32>,
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
    pub concurrency: u32,
    pub seed: u64,
    pub min_ratio: f64,
    pub max_ratio: f64,
    /// The system idle cap (ms): the largest warmup lead.
    pub lead_cap_ms: f64,
    pub placement: crate::scenario::types::Placement,
    pub run_id: String,
}

/// The lanes of a session-tree run: roots drawn round-robin in corpus order (aiperf's sequential
/// sampler, wrapping past the pool), each lane's start from the scenario's `start-tree` with its
/// lane index; a tree that cannot start a lane is passed over (at most `concurrency + 2·pool`
/// draws, as aiperf). Markers count trees per base trace in mint order.
pub fn plan_lanes(
    trees: &[Tree],
    p: &TreePlanParams,
    scenario: &mut crate::scenario::ScenarioInstance,
) -> Result<PlannedLanes, crate::scenario::ScenarioError> {
    let mut lanes = Vec::with_capacity(p.concurrency as usize);
    if trees.is_empty() {
        return Ok(PlannedLanes {
            lanes,
            next_draw: 0,
        });
    }
    let params = crate::scenario::types_v2::TreeParams {
        seed: p.seed,
        min_ratio: p.min_ratio,
        max_ratio: p.max_ratio,
        lead_cap_ms: p.lead_cap_ms,
    };
    let mut passes: HashMap<&str, u32> = HashMap::new();
    let attempts = p.concurrency as usize + 2 * trees.len();
    let mut draw = 0usize;
    while lanes.len() < p.concurrency as usize && draw < attempts {
        let tree = &trees[draw % trees.len()];
        draw += 1;
        let lane = lanes.len() as u32;
        let Some(start) = scenario.start_tree(params, lane, tree)? else {
            continue;
        };
        let pass = passes.entry(tree.trace_id.as_str()).or_insert(0);
        let marker = scenario.cache_bust_tree(
            p.placement,
            &crate::scenario::types_v2::TreeId {
                run_id: p.run_id.clone(),
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
    pub lanes: Vec<TreeLane>,
    pub next_draw: usize,
}
