//! What the session-tree scheduler ([`agentx::replay::sched`]) costs the client: CPU per streamed
//! token and memory per active tree, beside the single-stream replay on the same corpus.
//!
//! The corpus is a with-subagents synthetic one (`dataset synth --subagents`: 393 traces by default,
//! the shape of `cc-traces-weka-062126`), its session trees built into the dataset cache as
//! `agentx-host run agentx-v1.wasm` builds them. Lanes are planned by the bundled agentx-v1 component
//! (seed 42, starts between 0 and 0.7 of each tree, as `replay_client`'s cost runs) and think times
//! are off: every delay is 0 and every alive stream's first profiling turn is due when profiling
//! starts (offsets and warmup leads zeroed). Children still start at their recorded distance from the
//! spawning root turn, and joins and the replay barrier still hold turns: that is the tree's shape.
//!
//! 1. **cost**: the simulator on a thread of this process at `--speed max`, client CPU (the process's
//!    minus the simulator thread's) from the start of profiling, per streamed token, at concurrency 64
//!    and 256, with the peak number of requests in flight and the trees started. Beside it, the
//!    single-stream replay (`replay::run`, agentx-mvp, as `replay_client` runs it) on the same corpus
//!    twice: on the tree corpus's streams (each root, subagent and flat stream a trace of its own: the
//!    same requests the trees send) and on the source traces (top-level requests only, as a plain
//!    `run` reads the file).
//! 2. **memory**: the simulator in its own process (200 ms TTFT, 20 ms ITL) at concurrency 64: peak
//!    RSS growth per active tree (a lane always holds one) and per request in flight at the peak, and
//!    per session of the single-stream replay of the streams.
//!
//! Run: `cargo bench --bench tree_client [-- --secs 8 --conc 64,256 --traces 393 --reps 1
//! --replays trees,mvp-streams,mvp-traces --skip-cost --skip-memory]` (`--reps N` repeats each
//! level's runs, interleaved).

mod common;

/// The allocator of `agentx-host` (its `main.rs`), so the memory runs (children of this bench)
/// measure what the binary holds.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// And its options, as `agentx-host` sets them before `main`.
#[allow(unsafe_code)] // an ELF constructor: a plain function pointer, run once by the loader
#[used]
#[link_section = ".init_array"]
static ALLOCATOR_OPTIONS: extern "C" fn() = agentx::allocator::set_options;

use std::path::{Path, PathBuf};
use std::time::Instant;

use agentx::dataset::synth::SynthOptions;
use agentx::dataset::tree::corpus::{TreeCorpus, TreeOpen};
use agentx::dataset::{Dataset, PromptSynth};
use agentx::metrics::Dist;
use agentx::replay::sched::{self, TreeCounts, TreePlan};
use agentx::replay::tree::{plan_lanes, wit_tree, TreePlanParams};
use agentx::scenario::types::{Placement, Setting, Value};
use agentx::scenario::types_v2::Tree;
use agentx::sim::SimConfig;
use common::{arg, corpus, flag, measure, mvp_plan, mvp_replay, open_corpus, Figures, SimAt};

/// Starts drawn between these shares of each tree (of each trace for the single-stream replay).
const RATIOS: (f64, f64) = (0.0, 0.7);

/// The lanes of the memory runs.
const MEMORY_CONCURRENCY: u32 = 64;

/// The simulator of the memory runs: `agentx-host sim` flags.
const MEMORY_SIM: &[&str] = &[
    "--ttft-ms",
    "200",
    "--itl-ms",
    "20",
    "--max-model-len",
    "1048576",
];

/// The corpus's trees and their planner view.
struct Trees {
    corpus: std::sync::Arc<TreeCorpus>,
    wit: Vec<Tree>,
}

/// The session-tree plan at `conc` lanes with think times off, and the agentx-v1 instance that
/// planned it (the replay's scenario).
fn tree_plan(t: &Trees, conc: u32) -> (TreePlan, agentx::scenario::ScenarioInstance) {
    let mut inst = common::scenario("agentx-v1.wasm");
    let set = |name: &str, value| Setting {
        name: name.into(),
        value,
        explicit: true,
    };
    // Only the replay rules are read from the answer; the corpus named is the one the synthetic
    // corpus has the shape of (the scenario refuses a local one without --unsafe-override).
    let resolved = inst
        .resolve(
            &[
                set("concurrency", Value::Integers(vec![i64::from(conc)])),
                set(
                    "public-dataset",
                    Value::Text("semianalysis_cc_traces_weka_062126".into()),
                ),
                set("random-seed", Value::Integer(42)),
            ],
            1,
        )
        .unwrap()
        .unwrap_or_else(|v| panic!("agentx-v1 refused the settings: {v:?}"));
    let rules = inst.rules(&resolved.settings).unwrap();
    let planned = plan_lanes(
        &t.wit,
        &TreePlanParams {
            concurrency: conc,
            seed: 42,
            min_ratio: RATIOS.0,
            max_ratio: RATIOS.1,
            lead_cap_ms: rules.system_idle_cap_seconds.unwrap_or(10.0) * 1000.0,
            placement: Placement::FirstTurnPrefix,
            run_id: format!("bench{conc}"),
        },
        &mut inst,
    )
    .unwrap();
    assert_eq!(planned.lanes.len(), conc as usize, "lanes that could start");
    let mut lanes = planned.lanes;
    // Think time off: every alive stream is due at the start of profiling, primers all at once.
    for s in lanes.iter_mut().flat_map(|l| l.streams.iter_mut()) {
        s.offset_ms = 0.0;
        s.lead_ms = 0.0;
    }
    let c = &t.corpus;
    let plan = TreePlan {
        corpus: std::sync::Arc::clone(c),
        whole: agentx::replay::tree::Whole::of(&lanes),
        lanes,
        shard: None,
        next_draw: planned.next_draw,
        rules,
        delays_ms: c
            .trees
            .iter()
            .flat_map(|t| t.streams.iter())
            .map(|s| vec![0.0; s.turns.len()])
            .collect(),
        burst: false,
        pressure: None,
        arrivals: None,
    };
    (plan, inst)
}

/// A measured session-tree replay.
fn tree_replay(
    ds: &Dataset,
    t: &Trees,
    synth: &PromptSynth,
    sim_at: SimAt,
    conc: u32,
    secs: f64,
    out: &Path,
) -> (Figures, TreeCounts) {
    let (plan, inst) = tree_plan(t, conc);
    let cfg = common::replay_config(conc, secs);
    measure(
        ds,
        synth,
        inst,
        sim_at,
        &format!("trees c{conc}"),
        0.0,
        out,
        |inputs| async move {
            let o = sched::run(cfg, plan, inputs).await;
            (o.replay.stop, o.counts)
        },
    )
}

fn row(conc: u32, what: &str, f: &Figures, in_flight: &str, trees: &str) -> String {
    format!(
        "{:>5}  {:<12} {:>8} {:>9} {:>8.0} {:>10.0} {:>7.2} {:>8.2} {:>9} {:>6}",
        conc,
        what,
        f.requests,
        f.tokens,
        f.mean_isl(),
        f.tokens_per_sec(),
        f.client_cpu,
        f.cpu_us_per_token(),
        in_flight,
        trees
    )
}

/// What every replay of the bench reads: the corpus, its trees, the prompt synthesizer and the
/// profiling time per run.
struct Bench {
    ds: Dataset,
    trees: Trees,
    synth: PromptSynth,
    secs: f64,
}

impl Bench {
    /// Writes the corpus to `work` (a memory run opens the parent's) and builds its trees into the
    /// cache there; prints what it took unless this is a memory run.
    fn open(work: &Path, traces: usize, memory_run: bool, secs: f64) -> Bench {
        let t0 = Instant::now();
        let ds = if memory_run {
            open_corpus(work, "traces.jsonl")
        } else {
            corpus(
                work,
                "traces.jsonl",
                &SynthOptions {
                    traces,
                    seed: 1,
                    max_isl: None,
                    max_turns: None,
                    context: None,
                    subagents: true,
                },
            )
        };
        let written = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let tc = TreeCorpus::open(
            &ds,
            &TreeOpen {
                cache_dir: Some(work.join("cache")),
                ..TreeOpen::default()
            },
        )
        .unwrap();
        let built = t1.elapsed().as_secs_f64();
        let tc = std::sync::Arc::new(tc);
        if !memory_run {
            println!(
                "corpus: {} synthetic with-subagents traces ({} top-level requests), written and opened in {written:.1} s; \
                 {} trees, {} streams, {} stream requests, built into the cache in {built:.1} s",
                ds.len(),
                ds.total_turns(),
                tc.trees.len(),
                tc.streams.len(),
                tc.streams.total_turns()
            );
        }
        Bench {
            ds,
            trees: Trees {
                wit: tc.trees.iter().map(wit_tree).collect(),
                corpus: tc,
            },
            synth: PromptSynth::new(42),
            secs,
        }
    }

    /// One measured replay (`trees`, `mvp-streams` or `mvp-traces`) at `c` lanes: its figures, the
    /// peak requests in flight and the trees started.
    fn replay(&self, what: &str, sim: SimAt, c: u32, out: &Path) -> (Figures, u64, Option<u64>) {
        let (ds, synth, secs) = (&self.ds, &self.synth, self.secs);
        match what {
            "trees" => {
                let (f, n) = tree_replay(ds, &self.trees, synth, sim, c, secs, out);
                (f, n.peak_in_flight, Some(n.trees_started))
            }
            "mvp-streams" | "mvp-traces" => {
                let d = if what == "mvp-streams" {
                    &self.trees.corpus.streams
                } else {
                    ds
                };
                let (plan, inst) = mvp_plan(d, c, RATIOS);
                let f = mvp_replay(d, synth, plan, inst, sim, c, secs, 0.0, out);
                (f, u64::from(c), None)
            }
            other => panic!("--replays {other}: one of trees, mvp-streams, mvp-traces"),
        }
    }
}

/// A memory run (in a child process): one replay against the simulator in its own process, its
/// row of part 2.
fn memory_run(bench: &Bench, what: &str, work: &Path) {
    let c = MEMORY_CONCURRENCY;
    let out = work.join(format!("memory-{what}-{}", std::process::id()));
    // What opening the corpus and planning freed is handed back, not reused unseen.
    common::trim_heap();
    let (f, infl, _) = bench.replay(what, SimAt::Process(MEMORY_SIM), c, &out);
    let isl = Dist::of(f.records.iter().map(|r| r.isl as f64).collect()).unwrap();
    let growth = f.peak_rss_growth as f64;
    println!(
        "{:<12} {:>8} {:>8.0} {:>8.0} {:>9} {:>6.1} MiB {:>10.0} {:>11.0} {:>8.1}",
        what,
        f.requests,
        isl.p50,
        isl.avg,
        infl,
        growth / 1048576.0,
        growth / 1024.0 / f64::from(c),
        growth / 1024.0 / infl.max(1) as f64,
        growth / (infl.max(1) as f64 * isl.avg)
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// Part 1: every replay at every concurrency, the simulator on a thread at `--speed max`.
fn cost_runs(bench: &Bench, conc: &[u32], reps: usize, replays: &[String], tmp: &Path) {
    println!(
        "\n1. client cost at --speed max ({} s of profiling per run): trees, and the single-stream replay \
         of the tree corpus's streams and of the source traces",
        bench.secs
    );
    println!(
        "{:>5}  {:<12} {:>8} {:>9} {:>8} {:>10} {:>7} {:>8} {:>9} {:>6}",
        "conc",
        "replay",
        "requests",
        "tokens",
        "isl mean",
        "tokens/s",
        "cpu s",
        "us/token",
        "peak infl",
        "trees"
    );
    for &c in conc.iter().filter(|_| !flag("--skip-cost")) {
        for rep in 0..reps {
            for what in replays {
                let out = tmp.join(format!("{what}-{c}-{rep}"));
                let sim = SimAt::Thread(Box::new(SimConfig::max()));
                let (f, infl, started) = bench.replay(what, sim, c, &out);
                let started = started.map_or("-".into(), |n| n.to_string());
                println!("{}", row(c, what, &f, &infl.to_string(), &started));
            }
        }
    }
}

/// Part 2: each replay as a memory run, a child process of this bench on the corpus in `work`.
fn memory_runs(secs: f64, reps: usize, replays: &[String], work: &Path) {
    let c = MEMORY_CONCURRENCY;
    println!(
        "\n2. memory: simulator in its own process (200 ms TTFT, 20 ms ITL), concurrency {c}, {secs} s per run"
    );
    println!(
        "{:<12} {:>8} {:>8} {:>8} {:>9} {:>10} {:>10} {:>11} {:>8}",
        "replay",
        "requests",
        "isl p50",
        "isl mean",
        "peak infl",
        "rss growth",
        "KiB / lane",
        "KiB / infl",
        "B / token"
    );
    for _ in 0..reps {
        for what in replays {
            let status = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--memory-run", what, "--secs", &secs.to_string()])
                .arg("--work")
                .arg(work)
                .status()
                .unwrap();
            assert!(status.success(), "memory run {what}: {status}");
        }
    }
}

fn main() {
    common::raise_nofile();
    let secs: f64 = arg("--secs").unwrap_or(8.0);
    let traces: usize = arg("--traces").unwrap_or(393);
    let conc: Vec<u32> = arg::<String>("--conc")
        .unwrap_or_else(|| "64,256".into())
        .split(',')
        .map(|c| c.parse().unwrap())
        .collect();
    let replays: Vec<String> = arg::<String>("--replays")
        .unwrap_or_else(|| "trees,mvp-streams,mvp-traces".into())
        .split(',')
        .map(str::to_owned)
        .collect();
    let reps: usize = arg("--reps").unwrap_or(1);
    // A memory run is a child process of its own (`--memory-run REPLAY --work DIR`, on the corpus
    // the parent wrote to DIR): what earlier runs allocated and freed would otherwise be reused
    // unseen, and the figures fell run after run.
    let child: Option<String> = arg("--memory-run");
    let tmp = tempfile::tempdir().unwrap();
    let work: PathBuf = arg("--work").unwrap_or_else(|| tmp.path().to_owned());

    let bench = Bench::open(&work, traces, child.is_some(), secs);
    if let Some(what) = child {
        memory_run(&bench, &what, &work);
        return;
    }
    println!("live-assistant mode, think time off");
    cost_runs(&bench, &conc, reps, &replays, tmp.path());
    if !flag("--skip-memory") {
        memory_runs(secs, reps, &replays, &work);
    }
}
