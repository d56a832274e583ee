//! The planning stage: every lane's start (single-stream lanes from the dataset, or session trees
//! from the cached tree corpus), the turns' delays, and a dry run's plan.

use anyhow::bail;
use serde_json::json;

use super::config::{DryRun, RunConfig, RunOutcome};
use super::fresh_id;
use super::prepare::Prepared;
use crate::dataset::{self, Dataset, PromptSynth};
use crate::export::manifest::{LanePlan, StreamLanePlan, TreeLanePlan, TreeStreamPlan};
use crate::replay::{self, Plan, PlanParams};
use crate::scenario::types::{DelayParams, Placement, Resolved, StartParams};
use crate::scenario::{self, ScenarioInstance};

/// The plan of a run: its run id and seed (shard 0's in a sharded run), the prompt synthesizer,
/// and what it replays ([`Mode`]).
pub(super) struct Planned {
    pub run_id: String,
    pub seed: u64,
    pub synth: PromptSynth,
    pub mode: Mode,
}

/// What a run replays: single-stream lanes (this shard's share) or session trees.
pub(super) enum Mode {
    Streams(Plan),
    Trees(Box<TreePlanned>),
}

impl Planned {
    /// The lanes this process replays.
    pub(super) fn own_lane_ids(&self) -> Vec<u32> {
        match &self.mode {
            Mode::Streams(plan) => plan.lanes.iter().map(|l| l.lane).collect(),
            Mode::Trees(tp) => tp.own_lanes().iter().map(|l| l.lane).collect(),
        }
    }

    /// The lanes this process replays, as the manifest lists them.
    pub(super) fn own_lane_plans(&self) -> Vec<LanePlan> {
        match &self.mode {
            Mode::Streams(plan) => plan.lanes.iter().map(stream_lane_plan).collect(),
            Mode::Trees(tp) => tp.own_lanes().iter().map(tree_lane_plan).collect(),
        }
    }

    /// The traces (or trees) this process recycles.
    pub(super) fn pool_len(&self) -> usize {
        match &self.mode {
            Mode::Streams(plan) => plan.pool.len(),
            Mode::Trees(tp) => tp.owned_trees(),
        }
    }

    /// The share of the profiling phase a metric's timeline must cover to be reported: the
    /// scenario's rule for session trees, aiperf's otherwise.
    pub(super) fn coverage_required_ratio(&self) -> f64 {
        match &self.mode {
            Mode::Streams(_) => crate::export::aiperf::COVERAGE_REQUIRED_RATIO,
            Mode::Trees(tp) => tp.rules.min_metric_coverage,
        }
    }

    /// Each record's prefix stamps (the cached share the trace allowed), by request id.
    pub(super) fn prefix_stamps(
        &self,
        ds: &Dataset,
        records: &[crate::record::RequestRecord],
    ) -> std::collections::HashMap<String, Vec<(u32, u32)>> {
        match &self.mode {
            Mode::Streams(_) => prefix_stamps(ds, records),
            Mode::Trees(tp) => tp.prefix_stamps(records),
        }
    }

    /// The recorded times of the sessions the records replayed (their slowdown's baseline).
    pub(super) fn recorded_times(
        &self,
        ds: &Dataset,
        records: &[crate::record::RequestRecord],
    ) -> crate::metrics::sessions::RecordedTimes {
        match &self.mode {
            Mode::Streams(_) => recorded_times(ds, records),
            Mode::Trees(tp) => tree_recorded_times(&tp.corpus, records),
        }
    }

    /// The streams each replayed tree must run through for a whole job (none for single-stream
    /// sessions, which their records' turn counts judge).
    pub(super) fn job_shapes(
        &self,
        records: &[crate::record::RequestRecord],
    ) -> crate::metrics::jobs::JobShapes {
        match &self.mode {
            Mode::Streams(_) => crate::metrics::jobs::JobShapes::new(),
            Mode::Trees(tp) => job_shapes(&tp.corpus, records),
        }
    }
}

/// What planning answers: a plan to replay, or the outcome of a dry run.
// Made once per run and matched at once: boxing either variant would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Planning {
    Replay(Planned),
    Dry(RunOutcome),
}

/// Plans the run of `p` with the seed and run id the rendezvous settled (or the run's own).
pub(super) fn plan(
    cfg: &RunConfig,
    prepared: &Prepared,
    inst: &mut ScenarioInstance,
    seed: u64,
    run_id: Option<String>,
) -> anyhow::Result<Planning> {
    let settings = &prepared.settings;
    let conc = settings.concurrency;
    let synth = PromptSynth::for_counter(seed, &prepared.counter)
        .with_tiling(tiling(prepared.decisions.prompt_tiling));
    let run_id = run_id.unwrap_or_else(fresh_id);
    let dir = |run_id: &str| {
        cfg.output
            .resolve(&prepared.info.name, run_id, cfg.shard.is_some())
    };
    if prepared.trees {
        let mut tree_plan = plan_trees(&mut TreeDryRun {
            ds: &prepared.ds,
            basis: cfg.nested_basis,
            dataset_key: &prepared.dataset_key,
            inst,
            info: &prepared.info,
            hash: prepared.sc.hash(),
            resolved: &prepared.resolved,
            concurrency: conc,
            seed,
            ratios: (settings.min_ratio, settings.max_ratio),
            placement: settings.placement,
            run_id: run_id.clone(),
            think_only: settings.think_only,
            cap: settings.cap,
        })?;
        if let Some(arrivals) = &settings.arrivals {
            open_loop(&mut tree_plan, arrivals, settings.duration);
        }
        if cfg.dry_run {
            let mut json = tree_dry_run_json(cfg, prepared, &mut tree_plan);
            let mut table = tree_plan.table;
            let hit = super::plan_hit::of_trees(
                &prepared.ds,
                &tree_plan.lanes,
                cfg.plan.kv_capacity_tokens,
                settings.duration.as_secs_f64(),
            );
            if let Some(hit) = hit {
                table.push_str(&format!("\n{}", super::plan_hit::table_line(&hit, true)));
                json["achievable"] = json!(hit);
            }
            let dry_run = DryRun { json, table };
            return Ok(Planning::Dry(RunOutcome::planned(
                dir(&run_id),
                run_id,
                conc,
                dry_run,
            )));
        }
        tracing::debug!("plan:\n{}", tree_plan.table);
        tree_plan.shard = cfg
            .shard
            .as_ref()
            .map(|shard_cfg| (shard_cfg.index, shard_cfg.count));
        if let Some((i, n)) = tree_plan.shard {
            tracing::info!(
                "shard {i} of {n}: {} of {} lanes, recycling {} of {} trees",
                tree_plan.own_lanes().len(),
                tree_plan.lanes.len(),
                tree_plan.owned_trees(),
                tree_plan.corpus.trees.len()
            );
        }
        return Ok(Planning::Replay(Planned {
            run_id,
            seed,
            synth,
            mode: Mode::Trees(Box::new(tree_plan)),
        }));
    }
    let params = PlanParams {
        concurrency: conc,
        start: StartParams {
            seed,
            min_ratio: settings.min_ratio,
            max_ratio: settings.max_ratio,
        },
        delay: DelayParams {
            think_time_only: settings.think_only,
            cap_seconds: settings.cap,
        },
        placement: settings.placement,
        mode: cfg.plan.mode,
        tiling: synth.tiling(),
        run_id: run_id.clone(),
    };
    let full_plan = Plan::build(&prepared.ds, inst, &params)?;
    let mut plan = match &cfg.shard {
        Some(shard_cfg) => full_plan.shard(shard_cfg.index, shard_cfg.count),
        None => full_plan,
    };
    if settings.ignore_delays {
        plan.delays
            .iter_mut()
            .flatten()
            .for_each(|delay| *delay = 0.0);
    }
    if plan.wrapped {
        warn_shared(conc, plan.pool.len(), "usable traces");
    }
    if cfg.dry_run {
        let dry_run = single_stream_dry_run(cfg, prepared, &plan, &run_id, seed);
        return Ok(Planning::Dry(RunOutcome::planned(
            dir(&run_id),
            run_id,
            conc,
            dry_run,
        )));
    }
    let (min, med, max) = plan.percent_spread();
    tracing::info!(
        "plan: {} lanes; start turn as % of trace: min {min:.1}%, median {med:.1}%, max {max:.1}% (-v lists the lanes)",
        plan.lanes.len()
    );
    tracing::debug!("plan:\n{}", plan.table());
    Ok(Planning::Replay(Planned {
        run_id,
        seed,
        synth,
        mode: Mode::Streams(plan),
    }))
}

/// The plan of a single-stream dry run: JSON (`--json`) and the table.
fn single_stream_dry_run(
    cfg: &RunConfig,
    prepared: &Prepared,
    plan: &Plan,
    run_id: &str,
    seed: u64,
) -> DryRun {
    let mut json = json!({
        "scenario": {"name": prepared.info.name, "version": prepared.info.version, "sha256": prepared.sc.hash()},
        "run_id": run_id,
        "seed": seed,
        "concurrency": prepared.settings.concurrency,
        "dataset": {"traces": prepared.ds.len(), "usable": plan.pool.len(), "cache_key": prepared.dataset_key},
        "lanes": plan.lanes,
        "settings": json!(prepared.applied_settings()),
    });
    if let Some(sh) = &cfg.shard {
        json["shard"] = json!({"index": sh.index, "count": sh.count, "pool": plan.pool.len()});
    }
    let mut table = plan.table();
    for l in &plan.lanes {
        table.push_str(&format!("\nlane {:>4} marker {:?}", l.lane, l.marker));
    }
    let hit = super::plan_hit::of_streams(
        &prepared.ds,
        plan,
        cfg.plan.kv_capacity_tokens,
        prepared.settings.duration.as_secs_f64(),
    );
    if let Some(hit) = hit {
        table.push_str(&format!("\n{}", super::plan_hit::table_line(&hit, false)));
        json["achievable"] = json!(hit);
    }
    DryRun { json, table }
}

/// The `--dry-run --json` plan of a session-tree run: the planner's JSON with the world, the applied
/// settings and the scenario's rules; a shard's keeps its own lanes (and the plan learns its shard).
fn tree_dry_run_json(
    cfg: &RunConfig,
    prepared: &Prepared,
    tree_plan: &mut TreePlanned,
) -> serde_json::Value {
    let mut json = tree_plan.json.clone();
    json["scenario"]["world"] = json!(prepared.sc.world().as_str());
    json["settings"] = json!(prepared.applied_settings());
    let decisions = &prepared.decisions;
    json["rules"]["assistant_text"] = json!(match decisions.assistant_text {
        Some(scenario::AssistantText::Recorded) => "recorded",
        Some(scenario::AssistantText::Live) => "live",
        None => "flag",
    });
    json["rules"]["prompt_tiling"] = json!(match decisions.prompt_tiling {
        scenario::PromptTiling::RecordedLength => "recorded_length",
        scenario::PromptTiling::Reference => "reference",
    });
    json["rules"]["session_affinity_header"] = json!(decisions.session_affinity_header);
    json["rules"]["discover_model"] = json!(decisions.discover_model);
    json["rules"]["warmup_phase_name"] = json!(decisions.warmup_phase_name);
    if let Some(shard_cfg) = &cfg.shard {
        // A shard's plan: its own lanes of the whole plan, as for single streams.
        tree_plan.shard = Some((shard_cfg.index, shard_cfg.count));
        json["shard"] = json!({"index": shard_cfg.index, "count": shard_cfg.count,
                                   "trees_owned": tree_plan.owned_trees()});
        if let Some(lanes) = json["lanes"].as_array_mut() {
            lanes.retain(|l| {
                l["lane"].as_u64().map(|x| x % u64::from(shard_cfg.count))
                    == Some(u64::from(shard_cfg.index))
            });
        }
    }
    json
}

/// The warning of a run with more lanes than `what` (traces or trees): each is replayed on
/// several lanes at once, each with its own start and marker; past a hundred lanes apiece, the
/// prefix cache sees mostly one corpus's prefixes.
fn warn_shared(conc: u32, count: usize, what: &str) {
    let per = (conc as usize).div_ceil(count.max(1));
    if per >= 100 {
        tracing::warn!(
            "{count} {what} for {conc} lanes: each is replayed on about {per} lanes at once (own start and marker each); \
             a larger corpus gives a more realistic cache load (--dataset, or fewer lanes)"
        );
    } else {
        tracing::warn!(
            "{count} {what} for {conc} lanes: lanes share them, about {per} lanes each (each with its own start and marker)"
        );
    }
}

/// What planning a session-tree run needs.
pub(crate) struct TreeDryRun<'a> {
    ds: &'a Dataset,
    basis: Option<dataset::tree::NestedBasis>,
    dataset_key: &'a str,
    inst: &'a mut scenario::ScenarioInstance,
    info: &'a scenario::types::Info,
    hash: &'a str,
    resolved: &'a Resolved,
    concurrency: u32,
    seed: u64,
    ratios: (f64, f64),
    placement: Placement,
    run_id: String,
    think_only: bool,
    cap: Option<f64>,
}

/// A planned session-tree run: the corpus's trees (from the dataset cache), every lane's start, the
/// scenario's rules and every turn's delay, with the plan's JSON and table for `--dry-run`.
pub(crate) struct TreePlanned {
    pub(crate) corpus: std::sync::Arc<dataset::tree::corpus::TreeCorpus>,
    /// Every lane of the whole plan (a shard replays its own, [`TreePlanned::own_lanes`]).
    pub(crate) lanes: Vec<replay::tree::TreeLane>,
    /// A sharded run's `(index, count)`.
    pub(crate) shard: Option<(u32, u32)>,
    pub(crate) next_draw: usize,
    pub(crate) rules: scenario::types_v2::ReplayRules,
    pub(crate) delays_ms: Vec<Vec<f64>>,
    pub(crate) json: serde_json::Value,
    pub(crate) table: String,
}

impl TreePlanned {
    /// The lanes this process replays: every lane, or a shard's `l % count == index`.
    pub(crate) fn own_lanes(&self) -> Vec<replay::tree::TreeLane> {
        match self.shard {
            Some((i, n)) => self
                .lanes
                .iter()
                .filter(|l| l.lane % n == i)
                .cloned()
                .collect(),
            None => self.lanes.clone(),
        }
    }

    /// The trees this shard recycles (every tree in one process).
    pub(crate) fn owned_trees(&self) -> usize {
        match self.shard {
            Some((i, n)) => replay::tree::tree_owners(&self.lanes, self.corpus.trees.len(), n)
                .iter()
                .filter(|&&o| o == i)
                .count(),
            None => self.corpus.trees.len(),
        }
    }

    /// What the scheduler replays: this process's lanes (a shard's numbered from 0, with their
    /// numbers in the whole plan and the trees it recycles beside them), and the whole plan's
    /// timeline and marker passes.
    pub(crate) fn sched_plan(&self, flags: &super::config::TreeFlags) -> replay::sched::TreePlan {
        let mut lanes = self.own_lanes();
        let shard = self.shard.map(|(index, count)| {
            let lane_ids = lanes.iter().map(|l| l.lane).collect();
            for (i, l) in lanes.iter_mut().enumerate() {
                l.lane = i as u32;
            }
            replay::sched::TreeShard {
                index,
                owners: replay::tree::tree_owners(&self.lanes, self.corpus.trees.len(), count),
                lane_ids,
            }
        });
        replay::sched::TreePlan {
            corpus: std::sync::Arc::clone(&self.corpus),
            lanes,
            whole: replay::tree::Whole::of(&self.lanes),
            shard,
            next_draw: self.next_draw,
            rules: self.rules,
            delays_ms: self.delays_ms.clone(),
            burst: flags.burst,
            pressure: flags.pressure,
            arrivals: flags.arrivals,
        }
    }

    /// The theoretical prefix-cache stamps of every stream the profiling records replayed, by
    /// conversation id.
    pub(crate) fn prefix_stamps(
        &self,
        records: &[crate::record::RequestRecord],
    ) -> std::collections::HashMap<String, Vec<(u32, u32)>> {
        let wanted: std::collections::HashSet<&str> = records
            .iter()
            .filter(|r| r.phase == crate::record::Phase::Profiling)
            .map(|r| r.trace_id.as_str())
            .collect();
        let mut out = std::collections::HashMap::new();
        for t in &self.corpus.trees {
            for s in &t.streams {
                if wanted.contains(s.id.as_str()) && !out.contains_key(&s.id) {
                    out.insert(
                        s.id.clone(),
                        s.turns
                            .iter()
                            .map(|x| (x.prefix_hit_blocks, x.prefix_total_blocks))
                            .collect(),
                    );
                }
            }
        }
        out
    }
}

/// Each replayed stream of a tree corpus: its recorded turns (start and end, ms on its trace's
/// clock), for the sessions' slowdown.
pub(crate) fn tree_recorded_times(
    corpus: &dataset::tree::corpus::TreeCorpus,
    records: &[crate::record::RequestRecord],
) -> crate::metrics::sessions::RecordedTimes {
    let wanted: std::collections::HashSet<&str> =
        records.iter().map(|r| r.trace_id.as_str()).collect();
    let mut out = crate::metrics::sessions::RecordedTimes::new();
    for s in corpus.trees.iter().flat_map(|t| &t.streams) {
        if wanted.contains(s.id.as_str()) && !out.contains_key(&s.id) {
            let turns = s.turns.iter();
            let times = turns.map(|x| (x.ts_ms, x.ts_ms + x.api_time_ms.unwrap_or(0.0)));
            out.insert(s.id.clone(), times.collect());
        }
    }
    out
}

/// The streams with turns of each tree the records replayed (by trace id): what a whole job runs.
pub(crate) fn job_shapes(
    corpus: &dataset::tree::corpus::TreeCorpus,
    records: &[crate::record::RequestRecord],
) -> crate::metrics::jobs::JobShapes {
    let wanted: std::collections::HashSet<&str> = records
        .iter()
        .filter_map(|r| r.tree.as_ref().map(|t| t.source_trace_id.as_str()))
        .collect();
    corpus
        .trees
        .iter()
        .filter(|tree| wanted.contains(tree.trace_id.as_str()))
        .map(|tree| {
            let streams = tree.streams.iter().filter(|s| !s.turns.is_empty());
            let shape = streams.map(|s| (s.id.clone(), s.turns.len() as u32));
            (tree.trace_id.clone(), shape.collect())
        })
        .collect()
}

/// How many arrival offsets the dry run lists.
const DRY_RUN_ARRIVALS: usize = 20;

/// An open-loop run's plan: no lanes (no t*, no warmup primers; each arrival starts a tree at root
/// turn 0 from the corpus's first tree on), and the dry run's arrival plan in place of the lanes:
/// the process, the ceiling, the arrivals expected in the duration and the first offsets.
fn open_loop(
    planned: &mut TreePlanned,
    open_loop: &replay::sched::OpenLoop,
    duration: std::time::Duration,
) {
    planned.lanes.clear();
    planned.next_draw = 0;
    let first = open_loop.spec.offsets(DRY_RUN_ARRIVALS);
    let mut plan = open_loop.spec.json();
    plan["ceiling"] = json!(open_loop.slots);
    plan["expected_arrivals"] = json!(open_loop.spec.rate * duration.as_secs_f64());
    plan["first_offsets_s"] = json!(first);
    planned.json["lanes"] = json!([]);
    planned.json["arrivals"] = plan;
    let mut table = format!(
        "open-loop session arrivals: {} per second, {}{}, at most {} sessions in flight (an arrival over it is rejected); about {:.0} in {:.0} s\n",
        open_loop.spec.rate,
        open_loop.spec.pattern.name(),
        open_loop.spec
            .smoothness
            .map(|k| format!(" (shape {k})"))
            .unwrap_or_default(),
        open_loop.slots,
        open_loop.spec.rate * duration.as_secs_f64(),
        duration.as_secs_f64()
    );
    table.push_str("arrival  at (s)\n");
    for (i, at) in first.iter().enumerate() {
        table.push_str(&format!("{i:>7}  {at:.3}\n"));
    }
    planned.table = table;
}

/// Plans a session-tree run (a 0.2.0 scenario): the corpus's trees, every lane's t*, marker and
/// alive streams, the rules and the delays.
fn plan_trees(dry_run: &mut TreeDryRun<'_>) -> anyhow::Result<TreePlanned> {
    let t0 = std::time::Instant::now();
    let open = dataset::tree::corpus::TreeOpen {
        basis: dry_run.basis,
        ..Default::default()
    };
    let corpus = std::sync::Arc::new(dataset::tree::corpus::TreeCorpus::open(dry_run.ds, &open)?);
    let opened_in = t0.elapsed();
    let trees: Vec<_> = corpus.trees.iter().map(replay::tree::wit_tree).collect();
    let built_in = t0.elapsed();
    let rules = dry_run.inst.rules(&dry_run.resolved.settings)?;
    if !rules.recycle_from_turn_zero {
        bail!(
            "the scenario {} asks that a drained lane not restart its next tree at turn 0 (recycle-from-turn-zero false), which this host does not implement; use a scenario that recycles from turn 0",
            dry_run.info.name
        );
    }
    if !rules.allow_wrap && trees.len() < dry_run.concurrency as usize {
        bail!(
            "--concurrency {} is more lanes than the corpus's {} trees, and the scenario {} does not let lanes share trees (allow-wrap false); lower --concurrency or use a larger corpus",
            dry_run.concurrency,
            trees.len(),
            dry_run.info.name
        );
    }
    let planned = replay::tree::plan_lanes(
        &trees,
        &replay::tree::TreePlanParams {
            concurrency: dry_run.concurrency,
            seed: dry_run.seed,
            min_ratio: dry_run.ratios.0,
            max_ratio: dry_run.ratios.1,
            lead_cap_ms: rules.system_idle_cap_seconds.unwrap_or(10.0) * 1000.0,
            placement: dry_run.placement,
            run_id: dry_run.run_id.clone(),
        },
        dry_run.inst,
    )?;
    let lanes = planned.lanes;
    let planned_in = t0.elapsed().checked_sub(built_in).unwrap();
    let delays_ms = tree_delays(
        &corpus,
        dry_run.inst,
        scenario::types_v2::DelayParams {
            think_time_only: dry_run.think_only,
            cap_seconds: dry_run.cap,
        },
    )?;
    let delays_in = t0
        .elapsed()
        .checked_sub(built_in)
        .unwrap()
        .checked_sub(planned_in)
        .unwrap();
    tracing::info!(
        "session-tree plan: {} lanes over {} trees in {:.0} ms",
        lanes.len(),
        trees.len(),
        t0.elapsed().as_secs_f64() * 1e3
    );
    tracing::debug!(
        trees_cache = ?corpus.outcome(),
        open_ms = format!("{:.2}", opened_in.as_secs_f64() * 1e3),
        build_ms = format!("{:.2}", built_in.as_secs_f64() * 1e3),
        plan_ms = format!("{:.2}", planned_in.as_secs_f64() * 1e3),
        delays_ms = format!("{:.2}", delays_in.as_secs_f64() * 1e3),
        "session-tree plan timings"
    );
    if trees.len() < dry_run.concurrency as usize {
        warn_shared(dry_run.concurrency, trees.len(), "trees");
    }
    if lanes.len() < dry_run.concurrency as usize {
        bail!(
            "only {} of {} lanes could start: the corpus has {} trees, none of the others has a usable start",
            lanes.len(),
            dry_run.concurrency,
            trees.len()
        );
    }
    let streams: usize = trees.iter().map(|t| t.streams.len()).sum();
    let json = json!({
        "scenario": {"name": dry_run.info.name, "version": dry_run.info.version, "sha256": dry_run.hash,
                     "world": scenario::World::V0_2.as_str()},
        "run_id": dry_run.run_id,
        "seed": dry_run.seed,
        "concurrency": dry_run.concurrency,
        "dataset": {"traces": dry_run.ds.len(), "trees": trees.len(), "streams": streams, "cache_key": dry_run.dataset_key},
        "rules": {
            "warmup_max_tokens": rules.warmup_max_tokens,
            "warmup_spread": rules.warmup_spread,
            "system_idle_cap_seconds": rules.system_idle_cap_seconds,
            "trace_idle_cap_seconds": rules.trace_idle_cap_seconds,
            "overflow_ends_tree": rules.overflow_ends_tree,
            "warmup_failure_aborts": rules.warmup_failure_aborts,
            "recycle_from_turn_zero": rules.recycle_from_turn_zero,
            "allow_wrap": rules.allow_wrap,
            "min_metric_coverage": rules.min_metric_coverage,
        },
        "planning_ms": planned_in.as_secs_f64() * 1e3,
        "lanes": lanes,
    });
    let table = lane_table(&lanes);
    Ok(TreePlanned {
        corpus,
        lanes,
        shard: None,
        next_draw: planned.next_draw,
        rules,
        delays_ms,
        json,
        table,
    })
}

/// Every turn's end-to-start delay (ms) of every stream of `corpus`, from the scenario's rule.
fn tree_delays(
    corpus: &dataset::tree::corpus::TreeCorpus,
    inst: &mut ScenarioInstance,
    delay_params: scenario::types_v2::DelayParams,
) -> anyhow::Result<Vec<Vec<f64>>> {
    let mut delays_ms = Vec::with_capacity(corpus.streams.len());
    for (i, t) in corpus.trees.iter().enumerate() {
        for (si, s) in t.streams.iter().enumerate() {
            let traj = corpus.stream(i, si);
            let mut v = vec![0.0; s.turns.len()];
            for (k, w) in s.turns.windows(2).enumerate() {
                v[k + 1] = inst.tree_turn_delay(
                    delay_params,
                    scenario::types_v2::TurnTimes {
                        ts_ms: w[1].ts_ms,
                        prev_ts_ms: w[0].ts_ms,
                        prev_api_ms: w[0].api_time_ms,
                        think_time_ms: traj
                            .turn(k + 1)
                            .and_then(|x| x.think_time())
                            .map(|x| x * 1e3),
                    },
                )?;
            }
            delays_ms.push(v);
        }
    }
    Ok(delays_ms)
}

/// The dry run's lane table: each lane's trace, t* and streams (next/warm turn, offset).
fn lane_table(lanes: &[replay::tree::TreeLane]) -> String {
    let mut table = format!(
        "{:>5}  {:<24} {:>12}  streams (next/warm, offset ms)",
        "lane", "trace", "t* (ms)"
    );
    for l in lanes {
        let t = l
            .t_star_ms
            .map_or("turn-index".to_string(), |t| format!("{t:.1}"));
        let s: Vec<String> = l
            .streams
            .iter()
            .map(|s| {
                format!(
                    "{} {}/{}{} +{:.0}",
                    s.conversation_id,
                    s.next_turn,
                    s.warm_turn.map_or("-".into(), |w| w.to_string()),
                    if s.waiting { " (waits)" } else { "" },
                    s.offset_ms
                )
            })
            .collect();
        table.push_str(&format!(
            "\n{:>5}  {:<24} {:>12}  {}",
            l.lane,
            l.trace_id,
            t,
            s.join("; ")
        ));
    }
    table
}

/// The theoretical prefix-cache stamps of every trace the profiling records replayed.
pub(crate) fn prefix_stamps(
    ds: &Dataset,
    records: &[crate::record::RequestRecord],
) -> std::collections::HashMap<String, Vec<(u32, u32)>> {
    let mut out = std::collections::HashMap::new();
    for r in records {
        if r.phase != crate::record::Phase::Profiling || out.contains_key(&r.trace_id) {
            continue;
        }
        if let Some(t) = ds.find(&r.trace_id) {
            out.insert(r.trace_id.clone(), dataset::stats::prefix_stamps(t));
        }
    }
    out
}

/// Each replayed trace's recorded turns (start and end, ms on the trace's clock), for the
/// sessions' slowdown.
pub(crate) fn recorded_times(
    ds: &Dataset,
    records: &[crate::record::RequestRecord],
) -> crate::metrics::sessions::RecordedTimes {
    let mut out = crate::metrics::sessions::RecordedTimes::new();
    for r in records {
        if out.contains_key(&r.trace_id) {
            continue;
        }
        if let Some(t) = ds.find(&r.trace_id) {
            let times = t.turns().map(|x| {
                let start = 1000.0 * x.t();
                (start, start + 1000.0 * x.api_time().unwrap_or(0.0).max(0.0))
            });
            out.insert(r.trace_id.clone(), times.collect());
        }
    }
    out
}

/// The dataset's tiling for the scenario's decision.
fn tiling(tiling: scenario::PromptTiling) -> dataset::Tiling {
    match tiling {
        scenario::PromptTiling::RecordedLength => dataset::Tiling::RecordedLength,
        scenario::PromptTiling::Reference => dataset::Tiling::Reference,
    }
}

/// A single-stream lane as the manifest lists it.
fn stream_lane_plan(lane: &replay::plan::Lane) -> LanePlan {
    LanePlan::Stream(StreamLanePlan {
        lane: lane.lane,
        trace_id: lane.trace_id.clone(),
        turns: lane.turns,
        start_turn: lane.start_turn,
        marker: lane.marker.clone(),
    })
}

/// A session-tree lane as the manifest lists it.
fn tree_lane_plan(lane: &replay::tree::TreeLane) -> LanePlan {
    LanePlan::Tree(TreeLanePlan {
        lane: lane.lane,
        trace_id: lane.trace_id.clone(),
        t_star_ms: lane.t_star_ms,
        marker: lane.marker.clone(),
        pass: lane.pass,
        streams: lane
            .streams
            .iter()
            .map(|stream| TreeStreamPlan {
                conversation_id: stream.conversation_id.clone(),
                next_turn: stream.next_turn,
                warm_turn: stream.warm_turn,
                offset_ms: stream.offset_ms,
                lead_ms: stream.lead_ms,
                waiting: stream.waiting,
            })
            .collect(),
    })
}
