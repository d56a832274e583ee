//! What the replay client costs: CPU per streamed token, timing error, memory per session.
//!
//! The simulator runs in this process on its own thread and current-thread runtime
//! ([`agentx::sim::SimThread`]), so its CPU time is that thread's; the client's CPU is the process's
//! minus the simulator's, which covers everything a replay does: prompt synthesis into request
//! bodies, the hyper pool, SSE decoding, timestamps, the scenario calls and the record writer thread.
//!
//! Three measurements, on a synthetic corpus of 1,100 traces (the real corpus's shape):
//! 1. **cost**: `--speed max` (no simulated latency), think times off, at concurrency 1, 64, 256 and
//!    1024: CPU-microseconds per streamed token of the profiling phase (target at most 3). Warmup is a
//!    one-off cost and is left out: CPU and tokens are counted from the start of profiling.
//! 2. **timing error**: fixed 50 ms TTFT and 10 ms inter-token latency at concurrency 1024: measured
//!    TTFT minus 50 ms at p50/p99 (target p99 under 2 ms).
//! 3. **memory**: sessions whose contexts are about 100k tokens, at concurrency 64: peak RSS growth per
//!    active session. Here the simulator runs as its own `agentx-host sim` process, so the process's
//!    memory is the client's alone.
//!
//! Run: `cargo bench --bench replay_client [-- --secs 8 --conc 1,64,256,1024 --skip-memory]`.

mod common;

use std::path::Path;
use std::time::Duration;

use agentx::dataset::synth::SynthOptions;
use agentx::dataset::{Dataset, PromptSynth};
use agentx::metrics::Dist;
use agentx::sim::{SimConfig, Timing};
use common::{arg, corpus, mvp_plan, mvp_replay, Figures, SimAt};

#[allow(clippy::too_many_arguments)]
fn replay_once(
    ds: &Dataset,
    synth: &PromptSynth,
    sim_at: SimAt,
    conc: u32,
    secs: f64,
    ratios: (f64, f64),
    expected_ttft_ms: f64,
    min_start_isl: Option<u32>,
    out: &Path,
) -> Figures {
    let (mut plan, inst) = mvp_plan(ds, conc, ratios);
    if let Some(min) = min_start_isl {
        // Each lane starts at the first run of RUN turns of a trace whose contexts all have at least
        // `min` tokens (the warmup turn and what a lane replays in a few seconds), on traces that get
        // there.
        const RUN: usize = 6;
        let mut starts = ds.trajectories().filter_map(|t| {
            let isl: Vec<u32> = t.turns().map(|u| u.input_tokens()).collect();
            let k = isl.windows(RUN).position(|w| w.iter().all(|&n| n >= min))?;
            Some((t.index(), t.id().to_owned(), t.num_turns(), k))
        });
        for lane in &mut plan.lanes {
            let (trace, id, turns, k) = starts
                .next()
                .unwrap_or_else(|| panic!("fewer than {conc} traces reach {min} input tokens"));
            (lane.trace, lane.trace_id) = (trace, id);
            (lane.turns, lane.start_turn) = (turns as u32, k as u32);
        }
    }
    mvp_replay(
        ds,
        synth,
        plan,
        inst,
        sim_at,
        conc,
        secs,
        expected_ttft_ms,
        out,
    )
}

fn main() {
    common::raise_nofile();
    let secs: f64 = arg("--secs").unwrap_or(8.0);
    let conc: Vec<u32> = arg::<String>("--conc")
        .unwrap_or_else(|| "1,64,256,1024".into())
        .split(',')
        .map(|c| c.parse().unwrap())
        .collect();
    let skip_memory = common::flag("--skip-memory");
    let skip_timing = common::flag("--skip-timing");
    let tmp = tempfile::tempdir().unwrap();
    let ds = corpus(
        tmp.path(),
        "traces.jsonl",
        &SynthOptions {
            traces: 1100,
            seed: 7,
            max_isl: None,
            max_turns: None,
            context: None,
            subagents: false,
        },
    );
    let synth = &PromptSynth::new(42);
    println!(
        "corpus: {} synthetic traces, {} requests; live-assistant mode, think time off",
        ds.len(),
        ds.total_turns()
    );

    println!("\n1. client cost at --speed max ({secs} s of profiling per level)");
    println!("{}", common::cost_header());
    for &c in &conc {
        let f = replay_once(
            &ds,
            synth,
            SimAt::Thread(Box::new(SimConfig::max())),
            c,
            secs,
            (0.0, 0.7),
            0.0,
            None,
            &tmp.path().join(format!("cost-{c}")),
        );
        println!("{}", common::cost_row(c, &f));
    }

    if !skip_timing {
        let c = *conc.iter().max().unwrap_or(&1024);
        println!("\n2. timing error: fixed TTFT 50 ms, ITL 10 ms, concurrency {c}");
        let mut cfg = SimConfig::max();
        cfg.timing = Timing::Fixed {
            ttft: Duration::from_millis(50),
            itl: Duration::from_millis(10),
        };
        // Short contexts here: the simulator runs on one thread and must not be the bottleneck.
        let small = corpus(
            tmp.path(),
            "small.jsonl",
            &SynthOptions {
                traces: 1100,
                seed: 9,
                max_isl: Some(20_000),
                max_turns: Some(40),
                context: None,
                subagents: false,
            },
        );
        let f = replay_once(
            &small,
            synth,
            SimAt::Thread(Box::new(cfg)),
            c,
            secs.max(10.0),
            (0.0, 0.7),
            50.0,
            None,
            &tmp.path().join("timing"),
        );
        if let Some(d) = &f.ttft_over_ms {
            println!(
                "measured TTFT - 50 ms over {} profiling requests: p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
                d.count, d.p50, d.p90, d.p99, d.max
            );
        }
        println!(
            "client cpu {:.2} s for {} tokens ({:.2} us/token)",
            f.client_cpu,
            f.tokens,
            f.cpu_us_per_token()
        );
    }

    if !skip_memory {
        let c = 64;
        println!("\n3. memory: ~100k-token contexts, concurrency {c}");
        let big = corpus(
            tmp.path(),
            "big.jsonl",
            &SynthOptions {
                traces: 200,
                seed: 11,
                // Sessions compact at 80 % of this (120k tokens), so contexts stay above 100k for many turns.
                max_isl: Some(150_000),
                max_turns: None,
                context: None,
                subagents: false,
            },
        );
        let f = replay_once(
            &big,
            synth,
            SimAt::Process(&[
                "--ttft-ms",
                "200",
                "--itl-ms",
                "20",
                "--max-model-len",
                "1048576",
            ]),
            c,
            secs,
            (0.8, 0.95),
            0.0,
            Some(110_000),
            &tmp.path().join("memory"),
        );
        let isl: Vec<f64> = f.records.iter().map(|r| r.isl as f64).collect();
        let d = Dist::of(isl).unwrap();
        println!(
            "ISL of the {} requests: min {:.0}, p50 {:.0}, max {:.0} tokens; peak RSS growth {:.1} MiB = {:.0} KiB per active session",
            d.count,
            d.min,
            d.p50,
            d.max,
            f.peak_rss_growth as f64 / f64::from(1 << 20),
            f.peak_rss_growth as f64 / 1024.0 / f64::from(c)
        );
    }
}
