//! What the client-cost benches (`replay_client`, `tree_client`) share: a simulator on a thread of
//! this process (its CPU left out of the client's) or in a process of its own (for memory), the
//! client, body and replay configuration of a bench replay, and one measured replay: client CPU from
//! the start of profiling, peak RSS growth, and the streamed tokens and TTFTs of the records.

// Each bench uses its own subset of these helpers.
#![allow(dead_code)]

use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentx::client::{Client, ClientConfig, RequestBody};
use agentx::dataset::synth::{write_corpus, SynthOptions};
use agentx::dataset::{AssistantMode, Dataset, OpenOptions, PromptSynth, Tiling, TokenCounter};
use agentx::metrics::live::LiveRun;
use agentx::metrics::Dist;
use agentx::record::{read_records, Clock, Phase, RecordSink, RequestRecord};
use agentx::replay::{self, Plan, PlanParams, ReplayConfig, ReplayInputs, StopReason};
use agentx::scenario::types::{DelayParams, Placement, StartParams};
use agentx::scenario::{Limits, ScenarioEngine, ScenarioInstance};
use agentx::sim::{SimConfig, SimThread};
use nix::sys::resource::{getrlimit, getrusage, setrlimit, Resource, Usage, UsageWho};
use tokio::sync::watch;

pub(crate) fn cpu_secs(u: &Usage) -> f64 {
    let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
    t(u.user_time()) + t(u.system_time())
}

pub(crate) fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Hands the allocator's free pages back to the kernel (glibc's `malloc_trim`), so that a later
/// replay's allocations show in the RSS instead of reusing pages an earlier one freed.
#[allow(unsafe_code)] // a C call into the allocator, with no pointer handed over
pub(crate) fn trim_heap() {
    // SAFETY: malloc_trim only releases free memory of the allocator's arenas.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

/// Raises the open-file limit to its hard limit (a connection per lane, and more).
pub(crate) fn raise_nofile() {
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

/// The value after `name` on the command line.
pub(crate) fn arg<T: std::str::FromStr>(name: &str) -> Option<T> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
}

/// Whether `name` is on the command line.
pub(crate) fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

/// Writes a synthetic corpus to `dir/name` and opens it (its cache in `dir/cache`).
pub(crate) fn corpus(dir: &Path, name: &str, opts: &SynthOptions) -> Dataset {
    write_corpus(opts, &dir.join(name)).unwrap();
    open_corpus(dir, name)
}

/// Opens the corpus `dir/name` (its cache in `dir/cache`).
pub(crate) fn open_corpus(dir: &Path, name: &str) -> Dataset {
    Dataset::open_path(
        &dir.join(name),
        &OpenOptions {
            num_dataset_entries: None,
            max_context_length: None,
            max_osl: None,
            cache_dir: Some(dir.join("cache")),
            format: None,
            block_size: None,
            trace_block_size: None,
        },
    )
    .unwrap()
}

/// A simulator in its own process (`agentx-host sim`), so this process's memory is the client's alone.
pub(crate) struct SimProcess {
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
pub(crate) enum SimAt {
    /// On a thread of this process, whose CPU time is then left out of the client's.
    Thread(Box<SimConfig>),
    /// In its own process, with these `agentx-host sim` flags: for the memory measurement.
    Process(&'static [&'static str]),
}

/// The running simulator of one measurement.
struct Sim {
    thread: Option<Arc<SimThread>>,
    _process: Option<SimProcess>,
    url: String,
}

impl Sim {
    fn start(at: SimAt) -> Sim {
        match at {
            SimAt::Thread(mut cfg) => {
                // The synthetic corpora grow past 128k tokens; a large context keeps overflows out
                // of the figures.
                cfg.max_model_len = 1 << 20;
                let s = SimThread::start(*cfg).expect("start the simulator");
                let url = s.url();
                Sim {
                    thread: Some(Arc::new(s)),
                    _process: None,
                    url,
                }
            }
            SimAt::Process(args) => {
                let p = SimProcess::start(args);
                Sim {
                    thread: None,
                    url: p.url.clone(),
                    _process: Some(p),
                }
            }
        }
    }
}

/// The simulator thread's CPU seconds (0 for a simulator in its own process).
fn sim_cpu(s: &Option<Arc<SimThread>>) -> f64 {
    s.as_ref().map_or(0.0, |s| {
        s.cpu_seconds()
            .expect("the simulator thread's CPU time (/proc/thread-self/schedstat)")
    })
}

/// The replay configuration of a bench run: `secs` of profiling, live-assistant mode, server token
/// counts, no threshold, a 60 s grace period.
pub(crate) fn replay_config(conc: u32, secs: f64) -> ReplayConfig {
    ReplayConfig {
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
        timer_thread: true,
        warmup_progress_interval: None,
        chat_template: None,
        prompt_chain_block_size: Some(16),
        wire: agentx::dataset::Wire::Text,
        keep_reasoning: false,
    }
}

/// What one measured replay gave.
pub(crate) struct Figures {
    /// Content chunks (streamed tokens) of profiling records.
    pub tokens: u64,
    pub requests: usize,
    /// From the start of profiling to the replay's end.
    pub secs: f64,
    /// The process's CPU minus the simulator thread's, from the start of profiling.
    pub client_cpu: f64,
    /// Profiling TTFTs minus the expected one (ms).
    pub ttft_over_ms: Option<Dist>,
    pub peak_rss_growth: u64,
    /// Every record the replay wrote, warmup included.
    pub records: Vec<RequestRecord>,
}

impl Figures {
    pub(crate) fn tokens_per_sec(&self) -> f64 {
        self.tokens as f64 / self.secs
    }

    pub(crate) fn cpu_us_per_token(&self) -> f64 {
        self.client_cpu * 1e6 / self.tokens.max(1) as f64
    }

    /// The mean input tokens (server count) of the profiling requests: what a request body carries.
    pub(crate) fn mean_isl(&self) -> f64 {
        let (n, sum) = self
            .records
            .iter()
            .filter(|r| r.phase == Phase::Profiling)
            .fold((0u64, 0u64), |(n, s), r| (n + 1, s + r.isl));
        sum as f64 / n.max(1) as f64
    }
}

/// The RSS sampler: the largest RSS seen every 50 ms until stopped.
struct RssPeak {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl RssPeak {
    fn start() -> RssPeak {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            while !s.load(Ordering::Relaxed) {
                peak = peak.max(rss_bytes());
                std::thread::sleep(Duration::from_millis(50));
            }
            peak
        });
        RssPeak { stop, thread }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Runs one replay against a simulator at `sim_at` and measures it. `replay` gets the replay's
/// inputs (the records go to `out/records.jsonl`, CPU is marked at the start of profiling) and
/// returns the replay's stop reason with whatever else it wants to hand back. The run must complete,
/// and nothing but overflows and end-of-grace cancellations may fail.
#[allow(clippy::too_many_arguments)]
pub(crate) fn measure<T, F, Fut>(
    ds: &Dataset,
    synth: &PromptSynth,
    scenario: ScenarioInstance,
    sim_at: SimAt,
    run_id: &str,
    expected_ttft_ms: f64,
    out: &Path,
    replay: F,
) -> (Figures, T)
where
    F: FnOnce(ReplayInputs) -> Fut,
    Fut: Future<Output = (StopReason, T)>,
{
    let sim = Sim::start(sim_at);
    std::fs::create_dir_all(out).unwrap();
    // As a run: the live counts (busy lanes for every lane id a bench uses) take each record.
    let live = Arc::new(LiveRun::new(&(0..4096).collect::<Vec<u32>>()));
    let counted = live.clone();
    let sink = RecordSink::create_watched(
        &agentx::fsio::Root::create(out).unwrap(),
        vec![Box::new(move |rec: &RequestRecord| {
            counted.absorb(rec);
        })],
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = {
        let _g = rt.enter();
        Client::new(&ClientConfig {
            url: sim.url.clone(),
            endpoint: "/v1/chat/completions".into(),
            api: agentx::client::EndpointType::Chat,
            api_key: None,
            idle_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(600),
            http2: false,
            routing: agentx::client::RoutingHeaders::default(),
            reuse: agentx::client::ConnectionReuse::default(),
            tcp_user_timeout: None,
            trace_context: false,
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
    let rss0 = rss_bytes();
    let rss = RssPeak::start();
    // CPU is counted from the start of profiling: warmup and planning are one-off costs.
    let (mark_tx, mark_rx) = std::sync::mpsc::channel();
    let sim_at_profiling = sim.thread.clone();
    let u0 = getrusage(UsageWho::RUSAGE_SELF).unwrap();
    let (stop, extra) = rt.block_on(replay(ReplayInputs {
        dataset: ds.clone(),
        synth: synth.clone(),
        counter: TokenCounter::Words,
        client: Box::new(client),
        body,
        scenario,
        records: sink.sender(),
        clock: Clock::start(),
        interrupt: int_rx,
        progress: false,
        srv_row: None,
        live,
        on_profiling: Some(Box::new(move |_| {
            let u = getrusage(UsageWho::RUSAGE_SELF).unwrap();
            let _ = mark_tx.send((cpu_secs(&u), sim_cpu(&sim_at_profiling), Instant::now()));
        })),
        boundary: None,
        shard: None,
        early_stop: None,
    }));
    let (p0, s0, t0) = mark_rx.recv().unwrap();
    let wall = t0.elapsed().as_secs_f64();
    drop(rt);
    let written = sink.close().unwrap();
    let s1 = sim_cpu(&sim.thread);
    let u1 = getrusage(UsageWho::RUSAGE_SELF).unwrap();
    let p1 = cpu_secs(&u1);
    let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    eprintln!(
        "  [{run_id}] process cpu (whole run): user {:.2} s, system {:.2} s; simulator thread in profiling {:.2} s",
        tv(u1.user_time()) - tv(u0.user_time()),
        tv(u1.system_time()) - tv(u0.system_time()),
        s1 - s0
    );
    let peak = rss.stop();
    drop(sim);
    assert_eq!(stop, StopReason::Completed);
    let records = read_records(&out.join("records.jsonl")).unwrap();
    assert_eq!(records.len() as u64, written);
    // Overflows are normal replay outcomes and cancellations happen at the end of the grace period.
    let failed: Vec<_> = records
        .iter()
        .filter(|r| agentx::metrics::Outcome::of(r) == agentx::metrics::Outcome::Failed)
        .collect();
    assert!(
        failed.is_empty(),
        "failed requests: {:?}",
        &failed[..failed.len().min(3)]
    );
    let tokens: u64 = records
        .iter()
        .filter(|r| r.phase == Phase::Profiling)
        .map(|r| r.chunk_offsets_ns.len() as u64)
        .sum();
    let over: Vec<f64> = records
        .iter()
        .filter(|r| r.phase == Phase::Profiling)
        .filter_map(RequestRecord::ttft_ns)
        .map(|t| t as f64 / 1e6 - expected_ttft_ms)
        .collect();
    let figures = Figures {
        tokens,
        requests: records.len(),
        secs: wall,
        client_cpu: (p1 - p0) - (s1 - s0),
        ttft_over_ms: Dist::of(over),
        peak_rss_growth: peak.saturating_sub(rss0),
        records,
    };
    (figures, extra)
}

/// The bundled scenario component `name` (`guest-scenarios/dist/NAME`), instantiated.
pub(crate) fn scenario(name: &str) -> ScenarioInstance {
    let engine = ScenarioEngine::new(Limits::default(), None).unwrap();
    let wasm = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("guest-scenarios/dist")
        .join(name);
    engine.load(&wasm, None).unwrap().instantiate().unwrap()
}

/// The single-stream (agentx-mvp) plan of `ds` at `conc` lanes, seed 42, starts drawn between
/// `ratios` of each trace, think times off (every delay 0): the client is kept as busy as the lanes
/// allow.
pub(crate) fn mvp_plan(ds: &Dataset, conc: u32, ratios: (f64, f64)) -> (Plan, ScenarioInstance) {
    let mut inst = scenario("agentx-mvp.wasm");
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
        tiling: Tiling::RecordedLength,
        run_id: format!("bench{conc}"),
    };
    let mut plan = Plan::build(ds, &mut inst, &params).unwrap();
    plan.delays.iter_mut().flatten().for_each(|d| *d = 0.0);
    (plan, inst)
}

/// A measured single-stream replay (`replay::run`) of `plan` for `secs` of profiling.
#[allow(clippy::too_many_arguments)]
pub(crate) fn mvp_replay(
    ds: &Dataset,
    synth: &PromptSynth,
    plan: Plan,
    inst: ScenarioInstance,
    sim_at: SimAt,
    conc: u32,
    secs: f64,
    expected_ttft_ms: f64,
    out: &Path,
) -> Figures {
    let cfg = replay_config(conc, secs);
    let (f, ()) = measure(
        ds,
        synth,
        inst,
        sim_at,
        &format!("mvp c{conc}"),
        expected_ttft_ms,
        out,
        |inputs| async move { (replay::run(cfg, plan, inputs).await.stop, ()) },
    );
    f
}

/// The header and a row of the cost table.
pub(crate) fn cost_header() -> String {
    format!(
        "{:>6} {:>10} {:>12} {:>12} {:>14} {:>12}",
        "conc", "requests", "tokens", "tokens/s", "client cpu s", "cpu us/token"
    )
}

pub(crate) fn cost_row(conc: u32, f: &Figures) -> String {
    format!(
        "{:>6} {:>10} {:>12} {:>12.0} {:>14.2} {:>12.2}",
        conc,
        f.requests,
        f.tokens,
        f.tokens_per_sec(),
        f.client_cpu,
        f.cpu_us_per_token()
    )
}
