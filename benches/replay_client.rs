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

use std::path::Path;
use std::time::{Duration, Instant};

use agentx::client::{Client, ClientConfig, RequestBody};
use agentx::dataset::synth::{write_corpus, SynthOptions};
use agentx::dataset::{AssistantMode, Dataset, OpenOptions, PromptSynth, TokenCounter};
use agentx::metrics::Dist;
use agentx::record::{read_records, Clock, Phase, RecordSink};
use agentx::replay::{self, Plan, PlanParams, ReplayConfig, ReplayInputs};
use agentx::scenario::types::{DelayParams, Placement, StartParams};
use agentx::scenario::{Limits, ScenarioEngine};
use agentx::sim::{SimConfig, SimThread, Timing};
use nix::sys::resource::{getrlimit, getrusage, setrlimit, Resource, Usage, UsageWho};
use tokio::sync::watch;

fn cpu_secs(u: &Usage) -> f64 {
    let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
    t(u.user_time()) + t(u.system_time())
}

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// A simulator in its own process (`agentx-host sim`), so this process's memory is the client's alone.
struct SimProcess {
    url: String,
    child: std::process::Child,
}

impl SimProcess {
    fn start(args: &[&str]) -> SimProcess {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_agentx-host"))
            .args(["sim", "--host", "127.0.0.1", "--port", "0"])
            .args(args)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start agentx-host sim");
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        // "agentx-host sim: serving model `m` at http://127.0.0.1:PORT (...)"
        let url = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|l| {
                let at = l.find(" at http://")?;
                l[at + 4..].split_whitespace().next().map(str::to_owned)
            })
            .expect("the simulator's address on its stderr");
        std::thread::spawn(move || lines.for_each(drop));
        SimProcess { url, child }
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the simulator of a measurement runs.
enum SimAt {
    /// On a thread of this process, whose CPU time is then left out of the client's.
    Thread(Box<SimConfig>),
    /// In its own process, with these `agentx-host sim` flags: for the memory measurement.
    Process(&'static [&'static str]),
}

struct Figures {
    tokens: u64,
    requests: usize,
    secs: f64,
    client_cpu: f64,
    ttft_over_ms: Option<Dist>,
    peak_rss_growth: u64,
}

#[allow(clippy::too_many_arguments)]
fn replay_once(
    ds: &'static Dataset,
    synth: &'static PromptSynth,
    sim_at: SimAt,
    conc: u32,
    secs: f64,
    ratios: (f64, f64),
    expected_ttft_ms: f64,
    min_start_isl: Option<u32>,
    out: &Path,
) -> Figures {
    let (sim, sim_proc) = match sim_at {
        SimAt::Thread(mut cfg) => {
            // The synthetic corpus grows past 128k tokens; a large context keeps overflows out of the
            // figures.
            cfg.max_model_len = 1 << 20;
            (
                Some(SimThread::start(*cfg).expect("start the simulator")),
                None,
            )
        }
        SimAt::Process(args) => (None, Some(SimProcess::start(args))),
    };
    let sim_url = match (&sim, &sim_proc) {
        (Some(s), _) => s.url(),
        (_, Some(p)) => p.url.clone(),
        (None, None) => unreachable!(),
    };
    let engine = ScenarioEngine::new(Limits::default(), None).unwrap();
    let wasm = Path::new(env!("CARGO_MANIFEST_DIR")).join("guest-scenarios/dist/agentx-mvp.wasm");
    let sc = engine.load(&wasm, None).unwrap();
    let mut inst = sc.instantiate().unwrap();
    let params = PlanParams {
        concurrency: conc,
        start: StartParams {
            seed: 42,
            min_ratio: ratios.0,
            max_ratio: ratios.1,
        },
        delay: DelayParams {
            think_time_only: true,
            cap_seconds: Some(60.0),
        },
        placement: Placement::FirstTurnPrefix,
        mode: AssistantMode::Live,
        run_id: format!("bench{conc}"),
    };
    let mut plan = Plan::build(ds, &mut inst, &params).unwrap();
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
    // Think time off: the client is kept as busy as the lanes allow.
    plan.delays.iter_mut().flatten().for_each(|d| *d = 0.0);
    std::fs::create_dir_all(out).unwrap();
    let sink = RecordSink::create(&agentx::fsio::Root::create(out).unwrap()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = {
        let _g = rt.enter();
        Client::new(&ClientConfig {
            url: sim_url,
            endpoint: "/v1/chat/completions".into(),
            api_key: None,
            idle_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(600),
            http2: false,
            routing: Default::default(),
            reuse: Default::default(),
            tcp_user_timeout: None,
        })
        .unwrap()
    };
    let body = RequestBody::new(
        "agentx-sim",
        true,
        true,
        &[("ignore_eos".into(), serde_json::json!(true))],
    );
    let (_int_tx, int_rx) = watch::channel(0u32);
    let cfg = ReplayConfig {
        duration: Duration::from_secs_f64(secs),
        grace: Some(Duration::from_secs(60)),
        warmup_grace: None,
        failed_request_threshold: None,
        placement: Placement::FirstTurnPrefix,
        mode: AssistantMode::Live,
        use_server_token_count: true,
        overflow_phrases: None,
        run_id: format!("bench{conc}"),
        stats_interval: None,
        trace_idle_cap: None,
        warmup_progress_interval: None,
    };
    let rss0 = rss_bytes();
    let stop_sampler = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop_sampler.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(rss_bytes());
                std::thread::sleep(Duration::from_millis(50));
            }
            peak
        })
    };
    // CPU is counted from the start of profiling: warmup and planning are one-off costs.
    let (mark_tx, mark_rx) = std::sync::mpsc::channel();
    let sim = sim.map(std::sync::Arc::new);
    let sim_cpu = |s: &Option<std::sync::Arc<SimThread>>| {
        s.as_ref().map_or(0.0, |s| {
            s.cpu_seconds()
                .expect("the simulator thread's CPU time (/proc/thread-self/schedstat)")
        })
    };
    let sim_at_profiling = sim.clone();
    let u0 = getrusage(UsageWho::RUSAGE_SELF).unwrap();
    let outcome = rt.block_on(replay::run(
        cfg,
        plan,
        ReplayInputs {
            dataset: ds,
            synth,
            counter: TokenCounter::Words,
            client,
            body,
            scenario: inst,
            records: sink.sender(),
            clock: Clock::start(),
            interrupt: int_rx,
            progress: false,
            srv_row: None,
            on_profiling: Some(Box::new(move |_| {
                let u = getrusage(UsageWho::RUSAGE_SELF).unwrap();
                let _ = mark_tx.send((cpu_secs(&u), sim_cpu(&sim_at_profiling), Instant::now()));
            })),
            shard: None,
        },
    ));
    let (p0, s0, t0) = mark_rx.recv().unwrap();
    let wall = t0.elapsed().as_secs_f64();
    drop(rt);
    let written = sink.close().unwrap();
    let s1 = sim_cpu(&sim);
    let u1 = getrusage(UsageWho::RUSAGE_SELF).unwrap();
    let p1 = cpu_secs(&u1);
    let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    eprintln!(
        "  process cpu (whole run): user {:.2} s, system {:.2} s; simulator thread in profiling {:.2} s",
        tv(u1.user_time()) - tv(u0.user_time()),
        tv(u1.system_time()) - tv(u0.system_time()),
        s1 - s0
    );
    stop_sampler.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.join().unwrap();
    drop((sim, sim_proc));
    assert_eq!(outcome.stop, replay::StopReason::Completed);
    let recs = read_records(&out.join("records.jsonl")).unwrap();
    assert_eq!(recs.len() as u64, written);
    // Overflows are normal replay outcomes and cancellations happen at the end of the grace period.
    let failed: Vec<_> = recs
        .iter()
        .filter(|r| !r.ok() && !r.context_overflow && !r.cancelled)
        .collect();
    assert!(
        failed.is_empty(),
        "failed requests: {:?}",
        &failed[..failed.len().min(3)]
    );
    let tokens: u64 = recs
        .iter()
        .filter(|r| r.phase == Phase::Profiling)
        .map(|r| r.chunk_offsets_ns.len() as u64)
        .sum();
    let over: Vec<f64> = recs
        .iter()
        .filter(|r| r.phase == Phase::Profiling)
        .filter_map(|r| r.ttft_ns())
        .map(|t| t as f64 / 1e6 - expected_ttft_ms)
        .collect();
    Figures {
        tokens,
        requests: recs.len(),
        secs: wall,
        client_cpu: (p1 - p0) - (s1 - s0),
        ttft_over_ms: Dist::of(over),
        peak_rss_growth: peak.saturating_sub(rss0),
    }
}

fn arg<T: std::str::FromStr>(name: &str) -> Option<T> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
}

fn corpus(dir: &Path, name: &str, opts: SynthOptions) -> &'static Dataset {
    let path = dir.join(name);
    write_corpus(&opts, &path).unwrap();
    let ds = Dataset::open_path(
        &path,
        &OpenOptions {
            num_dataset_entries: None,
            max_context_length: None,
            max_osl: None,
            cache_dir: Some(dir.join("cache")),
        },
    )
    .unwrap();
    Box::leak(Box::new(ds))
}

fn main() {
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
    let secs: f64 = arg("--secs").unwrap_or(8.0);
    let conc: Vec<u32> = arg::<String>("--conc")
        .unwrap_or_else(|| "1,64,256,1024".into())
        .split(',')
        .map(|c| c.parse().unwrap())
        .collect();
    let skip_memory = std::env::args().any(|a| a == "--skip-memory");
    let skip_timing = std::env::args().any(|a| a == "--skip-timing");
    let tmp = tempfile::tempdir().unwrap();
    let ds = corpus(
        tmp.path(),
        "traces.jsonl",
        SynthOptions {
            traces: 1100,
            seed: 7,
            max_isl: None,
            max_turns: None,
            context: None,
            subagents: false,
        },
    );
    let synth: &'static PromptSynth = Box::leak(Box::new(PromptSynth::new(42)));
    println!(
        "corpus: {} synthetic traces, {} requests; live-assistant mode, think time off",
        ds.len(),
        ds.total_turns()
    );

    println!("\n1. client cost at --speed max ({secs} s of profiling per level)");
    println!(
        "{:>6} {:>10} {:>12} {:>12} {:>14} {:>12}",
        "conc", "requests", "tokens", "tokens/s", "client cpu s", "cpu us/token"
    );
    for &c in &conc {
        let f = replay_once(
            ds,
            synth,
            SimAt::Thread(Box::new(SimConfig::max())),
            c,
            secs,
            (0.0, 0.7),
            0.0,
            None,
            &tmp.path().join(format!("cost-{c}")),
        );
        println!(
            "{:>6} {:>10} {:>12} {:>12.0} {:>14.2} {:>12.2}",
            c,
            f.requests,
            f.tokens,
            f.tokens as f64 / f.secs,
            f.client_cpu,
            f.client_cpu * 1e6 / f.tokens.max(1) as f64
        );
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
            SynthOptions {
                traces: 1100,
                seed: 9,
                max_isl: Some(20_000),
                max_turns: Some(40),
                context: None,
                subagents: false,
            },
        );
        let f = replay_once(
            small,
            synth,
            SimAt::Thread(Box::new(cfg)),
            c,
            secs.max(10.0),
            (0.0, 0.7),
            50.0,
            None,
            &tmp.path().join("timing"),
        );
        if let Some(d) = f.ttft_over_ms {
            println!(
                "measured TTFT - 50 ms over {} profiling requests: p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
                d.count, d.p50, d.p90, d.p99, d.max
            );
        }
        println!(
            "client cpu {:.2} s for {} tokens ({:.2} us/token)",
            f.client_cpu,
            f.tokens,
            f.client_cpu * 1e6 / f.tokens.max(1) as f64
        );
    }

    if !skip_memory {
        let c = 64;
        println!("\n3. memory: ~100k-token contexts, concurrency {c}");
        let big = corpus(
            tmp.path(),
            "big.jsonl",
            SynthOptions {
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
            big,
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
        let recs = read_records(&tmp.path().join("memory/records.jsonl")).unwrap();
        let isl: Vec<f64> = recs.iter().map(|r| r.isl as f64).collect();
        let d = Dist::of(isl).unwrap();
        println!(
            "ISL of the {} requests: min {:.0}, p50 {:.0}, max {:.0} tokens; peak RSS growth {:.1} MiB = {:.0} KiB per active session",
            d.count,
            d.min,
            d.p50,
            d.max,
            f.peak_rss_growth as f64 / (1 << 20) as f64,
            f.peak_rss_growth as f64 / 1024.0 / c as f64
        );
    }
}
