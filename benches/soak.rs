//! Soak: a long replay under injected faults, watching the client for hangs, lost records and leaks.
//!
//! The simulator runs in this process, on a tokio runtime with one worker thread of its own, with a
//! fixed 200 ms TTFT and 20 ms inter-token latency and 1 % each of 5xx answers, connection resets
//! mid-stream, 2 s stalls mid-stream and malformed SSE events. (Warmup waits for its slowest
//! request, and synthetic outputs reach several thousand tokens: at 20 ms a token it takes a minute
//! or two.) The client is the real binary,
//! `agentx-host run`, as a child process, so its memory and file descriptors are its own: it replays
//! a synthetic corpus (400 traces, contexts up to 40k tokens, live-assistant mode) at concurrency 256
//! with turns back to back (`--ignore-trace-delays`: every lane always has a request in flight, so the
//! load is steady and the run carries as many requests as the server's timing allows) and no
//! failed-request threshold, so the ~3 % failures never stop it.
//!
//! Every 10 s the bench prints the child's VmRSS (and its anonymous and file-backed parts), open file
//! descriptors and threads (from `/proc`).
//! At the end it reads `records.jsonl` back and checks that it holds one record per chat request the
//! server received, and prints (and writes as JSON) the outcome counts, the RSS slope per minute
//! (least squares over the profiling samples after the first 5 minutes, or after the first sixth of
//! a shorter run), the file descriptors after that warm-up, the exit code and wall time.
//!
//! The fault seed is chosen (from the simulator's deterministic, request-id-keyed fault draws) to
//! leave the first `concurrency` requests of run id `soak` clean, as when a failed warmup request
//! ended every run (the seed-era scenario and `agentx-v1` still abort; the default `agentx` judges
//! warmup failures by the threshold), so soaks stay comparable; every later request meets the faults
//! at their rates.
//!
//! It asserts nothing about timing. It exits 1 when the child has not exited duration + grace +
//! 120 s after profiling began (or 720 s after its start while still in warmup, which the child
//! bounds at 600 s): a HANG, and the child is killed; or when records and requests differ.
//!
//! Run: `cargo bench --bench soak -- [--duration SECS] [--concurrency N] [--grace SECS] [--json PATH]
//! [--wrap "heaptrack -o FILE"]` (`--wrap`: the child under a profiler, to see what its heap holds
//! over time).
//! (defaults 1800, 256, 30 and `target/soak.json`; the child's log goes next to the JSON).

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use agentx::dataset::synth::{write_corpus, SynthOptions, SynthSummary};
use agentx::record::{read_records, Phase, RequestRecord};
use agentx::sim::{Faults, SimConfig, SimHandle, Timing};
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use serde_json::json;

/// The run id passed to the child: request ids are `soak-r0`, `soak-r1`, ... in send order.
const RUN_ID: &str = "soak";
const FAULT_RATE: f64 = 0.01;
const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// Beyond duration + grace after profiling began, how long the child may take (the exports).
const HANG_MARGIN: Duration = Duration::from_secs(120);
/// `--warmup-grace-period` of the child; the bench allows it `HANG_MARGIN` more.
const WARMUP_LIMIT: Duration = Duration::from_secs(600);

fn arg<T: std::str::FromStr>(name: &str) -> Option<T> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} {v}: not a valid value"))
        })
}

// ---- the simulator's fault draws (tokens::blocks::hash_str, sim::faults::plan), to pick the seed ----

fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn hash_str(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in s.as_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix64(h)
}

/// Whether the request with this id fails, is reset or gets a malformed event (stalls only delay).
fn faulted(seed: u64, request_id: &str) -> bool {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand::rngs::ChaCha8Rng::seed_from_u64(seed ^ hash_str(request_id));
    // The plan draws, in order: fail, status, reset, stall, malformed, then the positions.
    let [fail, _status, reset, _stall, bad]: [f64; 5] = rng.random();
    fail < FAULT_RATE || reset < FAULT_RATE || bad < FAULT_RATE
}

/// The first fault seed whose draws leave the `n` warmup requests (`soak-r0`..) without a failure.
fn clean_warmup_seed(n: u32) -> u64 {
    (1..)
        .find(|&seed| !(0..n).any(|r| faulted(seed, &format!("{RUN_ID}-r{r}"))))
        .unwrap()
}

// ---- /proc ----

struct Sample {
    /// Seconds since the child was started.
    t: f64,
    rss_kib: u64,
    /// VmRSS's anonymous part (the heap and stacks) and its file-backed part (mapped files: the
    /// binary and the dataset cache, whose pages count as they are touched and can be reclaimed).
    anon_kib: u64,
    file_kib: u64,
    fds: u64,
    threads: u64,
}

fn sample(pid: u32, t: f64) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(Sample {
        t,
        rss_kib: field("VmRSS:")?,
        anon_kib: field("RssAnon:").unwrap_or(0),
        file_kib: field("RssFile:").unwrap_or(0),
        fds,
        threads: field("Threads:").unwrap_or(0),
    })
}

/// Least-squares slope of y over x (None with fewer than two distinct x).
fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// Whether a line of the log contains `needle`.
fn log_has(log: &Path, needle: &str) -> bool {
    std::fs::File::open(log)
        .map(|f| {
            std::io::BufReader::new(f)
                .lines()
                .map_while(Result::ok)
                .any(|l| l.contains(needle))
        })
        .unwrap_or(false)
}

fn log_tail(log: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The bench's command line (defaults in the module docs).
struct Options {
    duration: f64,
    concurrency: u32,
    grace: f64,
    json_path: PathBuf,
    log_path: PathBuf,
    /// The profiling warm-up the memory slopes leave out: 5 minutes, or a sixth of a shorter run.
    warm: f64,
}

impl Options {
    fn parse() -> Options {
        let duration: f64 = arg("--duration").unwrap_or(1800.0);
        let concurrency: u32 = arg("--concurrency").unwrap_or(256);
        let grace: f64 = arg("--grace").unwrap_or(30.0);
        // The bench binary is target/<profile>/deps/soak-<hash>.
        let target = std::env::current_exe()
            .ok()
            .and_then(|p| p.ancestors().nth(3).map(Path::to_path_buf))
            .unwrap_or_else(|| PathBuf::from("target"));
        let json_path: PathBuf = arg("--json").unwrap_or_else(|| target.join("soak.json"));
        let log_path = json_path.with_extension("log");
        let warm = (duration / 6.0).min(300.0);
        Options {
            duration,
            concurrency,
            grace,
            json_path,
            log_path,
            warm,
        }
    }
}

/// The simulator's configuration: fixed timing and each fault at `FAULT_RATE`.
fn sim_config(fault_seed: u64) -> SimConfig {
    let mut cfg = SimConfig::h200();
    cfg.timing = Timing::Fixed {
        ttft: Duration::from_millis(200),
        itl: Duration::from_millis(20),
    };
    // Prompt plus output stay far below this: no context overflows.
    cfg.max_model_len = 1 << 20;
    cfg.faults = Faults {
        seed: fault_seed,
        fail_rate: FAULT_RATE,
        reset_rate: FAULT_RATE,
        stall_rate: FAULT_RATE,
        stall: Duration::from_secs(2),
        malformed_rate: FAULT_RATE,
        ..Faults::default()
    };
    cfg
}

/// The simulator on a runtime with one worker thread of its own (SimThread does not expose the
/// request count, so the bench keeps the server's handle).
fn start_sim(cfg: SimConfig) -> (tokio::runtime::Runtime, SimHandle) {
    let sim_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("agentx-sim")
        .enable_all()
        .build()
        .unwrap();
    let sim = {
        let _g = sim_rt.enter();
        agentx::sim::spawn(cfg).expect("start the simulator")
    };
    (sim_rt, sim)
}

/// Starts `agentx-host run` on the corpus against the simulator, its output into the log.
fn spawn_client(opts: &Options, sim: &SimHandle, corpus: &Path, workdir: &Path) -> Child {
    let log = std::fs::File::create(&opts.log_path).expect("create the child's log");
    // `--wrap "heaptrack -o FILE"`: the child runs under a profiler (its RSS is then the wrapper's
    // process, so read the memory from the profile).
    let wrap: Option<String> = arg("--wrap");
    let mut words = wrap.as_deref().unwrap_or("").split_whitespace();
    let mut child = match words.next() {
        Some(tool) => {
            let mut c = Command::new(tool);
            c.args(words).arg(env!("CARGO_BIN_EXE_agentx-host"));
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_agentx-host")),
    };
    child
        .arg("run")
        .args(["--url", &sim.url(), "--model", &sim.config().model])
        .arg("--input-file")
        .arg(corpus)
        .args(["--concurrency", &opts.concurrency.to_string()])
        .args(["--benchmark-duration", &opts.duration.to_string()])
        .args(["--benchmark-grace-period", &opts.grace.to_string()])
        .args(["--warmup-grace-period", &WARMUP_LIMIT.as_secs().to_string()])
        .args(["--ignore-trace-delays", "--unsafe-override"])
        .args(["--random-seed", "1", "--run-id", RUN_ID])
        .arg("--output-artifact-dir")
        .arg(workdir.join("artifacts"))
        .current_dir(workdir)
        .env("AGENTX_HOME", workdir.join("home"))
        .env("AGENTX_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start agentx-host run")
}

/// What watching the child saw: its exit, its samples, and when profiling and the drain began
/// (seconds since its start, from its log).
struct Watched {
    status: ExitStatus,
    samples: Vec<Sample>,
    prof_start: Option<f64>,
    prof_end: Option<f64>,
}

/// Samples the child every `SAMPLE_EVERY` (printing a row each time) until it exits; on a HANG
/// kills it and gives None.
fn watch(child: &mut Child, started: Instant, opts: &Options) -> Option<Watched> {
    let (duration, grace, log_path) = (opts.duration, opts.grace, &opts.log_path);
    let pid = child.id();
    println!(
        "child pid {pid}; its log: {}\n{:>7} {:>10} {:>9} {:>9} {:>6} {:>8}  phase",
        log_path.display(),
        "t s",
        "rss MiB",
        "anon MiB",
        "file MiB",
        "fds",
        "threads"
    );
    let mut samples: Vec<Sample> = Vec::new();
    let (mut prof_start, mut prof_end): (Option<f64>, Option<f64>) = (None, None);
    let mut next = started;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for the child") {
            break st;
        }
        let t = started.elapsed();
        let deadline = match prof_start {
            Some(p) => Duration::from_secs_f64(p + duration + grace) + HANG_MARGIN,
            None => WARMUP_LIMIT + HANG_MARGIN,
        };
        if t > deadline {
            report_hang(t, prof_start, opts);
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        if Instant::now() >= next {
            next += SAMPLE_EVERY;
            let ts = t.as_secs_f64();
            if prof_start.is_none() && log_has(log_path, "Phase profiling started") {
                prof_start = Some(ts);
            }
            if prof_start.is_some()
                && prof_end.is_none()
                && (log_has(log_path, "duration reached")
                    || log_has(log_path, "Phase profiling complete"))
            {
                prof_end = Some(ts);
            }
            let phase = match (prof_start, prof_end) {
                (None, _) => "preparation/warmup",
                (Some(_), None) => "profiling",
                (Some(_), Some(_)) => "drain/exports",
            };
            if let Some(s) = sample(pid, ts) {
                println!(
                    "{:>7.0} {:>10.1} {:>9.1} {:>9.1} {:>6} {:>8}  {phase}",
                    s.t,
                    s.rss_kib as f64 / 1024.0,
                    s.anon_kib as f64 / 1024.0,
                    s.file_kib as f64 / 1024.0,
                    s.fds,
                    s.threads
                );
                let _ = std::io::stdout().flush();
                samples.push(s);
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    Some(Watched {
        status,
        samples,
        prof_start,
        prof_end,
    })
}

fn report_hang(t: Duration, prof_start: Option<f64>, opts: &Options) {
    let (duration, grace) = (opts.duration, opts.grace);
    println!(
        "\nHANG: agentx-host run has not exited {:.0} s after its start ({}); killing it. \
         Last lines of its log:\n{}",
        t.as_secs_f64(),
        match prof_start {
            Some(p) => format!(
                "profiling began at {p:.0} s; duration {duration} s + grace {grace} s + {} s",
                HANG_MARGIN.as_secs()
            ),
            None => format!(
                "still in warmup, bounded at {} s, + {} s",
                WARMUP_LIMIT.as_secs(),
                HANG_MARGIN.as_secs()
            ),
        },
        log_tail(&opts.log_path, 30)
    );
}

/// The records' outcomes and retries.
#[derive(Default)]
struct Outcomes {
    counts: BTreeMap<String, u64>,
    warmup: u64,
    retried: u64,
    retried_ok: u64,
    retry_reasons: BTreeMap<String, u64>,
}

impl Outcomes {
    fn of(records: &[RequestRecord]) -> Outcomes {
        let mut tally = Outcomes::default();
        for r in records {
            tally.warmup += u64::from(r.phase == Phase::Warmup);
            let key = if r.cancelled {
                "cancelled".to_string()
            } else if r.context_overflow {
                "context_overflow".to_string()
            } else if let Some(e) = &r.error {
                let kind = e.kind.split(':').next().unwrap_or(&e.kind);
                if e.code != 0 {
                    format!("error {kind} {}", e.code)
                } else {
                    format!("error {kind}")
                }
            } else {
                "ok".to_string()
            };
            *tally.counts.entry(key).or_default() += 1;
            if let Some(why) = &r.retry {
                tally.retried += 1;
                tally.retried_ok += u64::from(agentx::metrics::Outcome::of(r).is_ok());
                let short: String = why.chars().take(80).collect();
                *tally.retry_reasons.entry(short).or_default() += 1;
            }
        }
        tally
    }
}

/// Memory and descriptors over the profiling window after its warm-up (`steady`), in MiB.
struct Window {
    /// Profiling's start and the window's end.
    p0: f64,
    p1: f64,
    steady_samples: usize,
    rss_slope: Option<f64>,
    anon_slope: Option<f64>,
    file_slope: Option<f64>,
    fd_min: Option<u64>,
    fd_max: Option<u64>,
    rss_peak: Option<f64>,
    /// (t, RSS) of the window's first sample.
    first: Option<(f64, f64)>,
    anon_ends: Option<[f64; 2]>,
    /// (t, RSS, fds) of the window's last sample and of the last sample of all.
    last: Option<(f64, f64, u64)>,
    final_sample: Option<(f64, f64, u64)>,
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

impl Window {
    fn of(watched: &Watched, opts: &Options) -> Window {
        let (samples, duration, warm) = (&watched.samples, opts.duration, opts.warm);
        let p0 = watched.prof_start.unwrap_or(0.0);
        // A tree replay logs no "duration reached": its end is then the phase's end, after the grace.
        let p1 = watched.prof_end.unwrap_or(p0 + duration).min(p0 + duration);
        let steady: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.t >= p0 + warm && s.t <= p1)
            .collect();
        let slope_of = |k: fn(&Sample) -> u64| {
            slope(
                &steady
                    .iter()
                    .map(|s| (s.t / 60.0, mib(k(s))))
                    .collect::<Vec<_>>(),
            )
        };
        Window {
            p0,
            p1,
            steady_samples: steady.len(),
            rss_slope: slope_of(|s| s.rss_kib),
            anon_slope: slope_of(|s| s.anon_kib),
            file_slope: slope_of(|s| s.file_kib),
            fd_min: steady.iter().map(|s| s.fds).min(),
            fd_max: steady.iter().map(|s| s.fds).max(),
            rss_peak: samples.iter().map(|s| s.rss_kib).max().map(mib),
            first: steady.first().map(|s| (s.t, mib(s.rss_kib))),
            anon_ends: steady
                .first()
                .zip(steady.last())
                .map(|(a, b)| [mib(a.anon_kib), mib(b.anon_kib)]),
            last: steady.last().map(|s| (s.t, mib(s.rss_kib), s.fds)),
            final_sample: samples.last().map(|s| (s.t, mib(s.rss_kib), s.fds)),
        }
    }
}

/// Everything the soak found, for its JSON and its printed summary.
struct Findings<'a> {
    opts: &'a Options,
    made: SynthSummary,
    fault_seed: u64,
    wall: f64,
    requests: u64,
    records: usize,
    watched: Watched,
    outcomes: Outcomes,
    window: Window,
}

impl Findings<'_> {
    /// Whether every chat request the server received left exactly one record.
    fn equal(&self) -> bool {
        self.records as u64 == self.requests
    }

    fn write_json(&self) {
        let (opts, watched, outcomes, window) =
            (self.opts, &self.watched, &self.outcomes, &self.window);
        let (first, last, final_sample) = (window.first, window.last, window.final_sample);
        let summary = json!({
            "duration_s": opts.duration,
            "concurrency": opts.concurrency,
            "grace_s": opts.grace,
            "corpus": {"traces": self.made.traces, "requests": self.made.requests, "max_isl": 40_000},
            "sim": {"ttft_ms": 200, "itl_ms": 20, "fault_rate_each": FAULT_RATE, "stall_s": 2,
                    "fault_seed": self.fault_seed},
            "exit_code": watched.status.code(),
            "wall_s": self.wall,
            "profiling_start_s": watched.prof_start,
            "drain_start_s": watched.prof_end,
            "requests_received": self.requests,
            "records": self.records,
            "records_equal_requests": self.equal(),
            "warmup_records": outcomes.warmup,
            "outcomes": outcomes.counts,
            "retried": outcomes.retried,
            "retried_ok": outcomes.retried_ok,
            "retry_reasons": outcomes.retry_reasons,
            "steady_window_s": [window.p0 + opts.warm, window.p1],
            "steady_samples": window.steady_samples,
            "rss_mib_at_window_start": first.map(|f| f.1),
            "rss_mib_at_window_end": last.map(|l| l.1),
            "rss_mib_last_sample": final_sample.map(|l| l.1),
            "rss_mib_peak": window.rss_peak,
            "rss_slope_mib_per_min": window.rss_slope,
            "rss_anon_slope_mib_per_min": window.anon_slope,
            "rss_file_slope_mib_per_min": window.file_slope,
            "rss_anon_mib_at_window_start_end": window.anon_ends,
            "fds_min": window.fd_min,
            "fds_max": window.fd_max,
            "fds_at_window_end": last.map(|l| l.2),
            "samples_columns": ["t_s", "rss_kib", "fds", "threads", "rss_anon_kib", "rss_file_kib"],
            "samples": watched.samples.iter().map(|s| json!([s.t, s.rss_kib, s.fds, s.threads, s.anon_kib, s.file_kib])).collect::<Vec<_>>(),
        });
        if let Some(dir) = opts.json_path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        std::fs::write(
            &opts.json_path,
            serde_json::to_string_pretty(&summary).unwrap() + "\n",
        )
        .expect("write the JSON summary");
    }

    fn print(&self) {
        let (status, outcomes, window) = (&self.watched.status, &self.outcomes, &self.window);
        let (wall, requests, warmup) = (self.wall, self.requests, outcomes.warmup);
        let (retried, retried_ok) = (outcomes.retried, outcomes.retried_ok);
        let (p0, p1) = (window.p0, window.p1);
        let (first, last, final_sample) = (window.first, window.last, window.final_sample);
        let opt = |v: Option<f64>, unit: &str| v.map_or("-".into(), |v| format!("{v:.2}{unit}"));
        println!("\n==== soak summary ====");
        println!(
            "child exit code      {}",
            status
                .code()
                .map_or_else(|| format!("{status}"), |c| c.to_string())
        );
        println!(
            "wall time            {wall:.0} s (profiling from {p0:.0} s, drain from {p1:.0} s)"
        );
        println!("requests received    {requests}");
        println!(
            "records written      {} ({warmup} warmup){}",
            self.records,
            if self.equal() { "" } else { "  <-- MISMATCH" }
        );
        for (k, v) in &outcomes.counts {
            println!(
                "  {k:<30} {v:>8}  {:5.2} %",
                100.0 * *v as f64 / self.records.max(1) as f64
            );
        }
        println!("retried once         {retried} ({retried_ok} then ok)");
        for (why, n) in &outcomes.retry_reasons {
            println!("  {n:>6}  {why}");
        }
        println!(
            "window               {:.0}-{:.0} s, {} samples",
            p0 + self.opts.warm,
            p1,
            window.steady_samples
        );
        println!(
            "RSS                  {} at window start, {} at window end, {} last sample, {} peak",
            opt(first.map(|f| f.1), " MiB"),
            opt(last.map(|l| l.1), " MiB"),
            opt(final_sample.map(|l| l.1), " MiB"),
            opt(window.rss_peak, " MiB")
        );
        println!(
            "RSS slope            {} per minute (anonymous {}, file-backed {})",
            opt(window.rss_slope, " MiB"),
            opt(window.anon_slope, " MiB"),
            opt(window.file_slope, " MiB")
        );
        println!(
            "fds in window        min {} max {} at end {}",
            window.fd_min.map_or("-".into(), |v| v.to_string()),
            window.fd_max.map_or("-".into(), |v| v.to_string()),
            last.map_or("-".into(), |l| l.2.to_string())
        );
        println!("json                 {}", self.opts.json_path.display());
        if status.code() != Some(0) {
            println!(
                "\nnote: agentx-host run exited with {status}; last lines of its log:\n{}",
                log_tail(&self.opts.log_path, 20)
            );
        }
    }
}

fn main() -> ExitCode {
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
    let opts = Options::parse();
    let (duration, concurrency, grace) = (opts.duration, opts.concurrency, opts.grace);

    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("traces.jsonl");
    let synth = SynthOptions {
        traces: 400,
        seed: 11,
        max_isl: Some(40_000),
        max_turns: None,
        context: None,
        subagents: false,
    };
    let made = write_corpus(&synth, &corpus).expect("write the synthetic corpus");

    let fault_seed = clean_warmup_seed(concurrency);
    let (sim_rt, sim) = start_sim(sim_config(fault_seed));
    println!(
        "soak: {} s at concurrency {concurrency}, grace {grace} s; {} synthetic traces ({} requests, \
         ISL <= 40k); simulator at {} (TTFT 200 ms, ITL 20 ms; 1 % each of 5xx, resets, 2 s stalls, \
         malformed SSE; fault seed {fault_seed}, the first to leave the warmup clean)",
        duration,
        made.traces,
        made.requests,
        sim.url()
    );

    let started = Instant::now();
    let mut child = spawn_client(&opts, &sim, &corpus, tmp.path());
    let Some(watched) = watch(&mut child, started, &opts) else {
        return ExitCode::FAILURE;
    };
    let wall = started.elapsed().as_secs_f64();
    let requests = sim.chat_requests();
    drop(sim);
    drop(sim_rt);

    let records = match read_records(&tmp.path().join("artifacts").join("records.jsonl")) {
        Ok(r) => r,
        Err(e) => {
            println!(
                "cannot read the records: {e}\nlast lines of the child's log:\n{}",
                log_tail(&opts.log_path, 30)
            );
            return ExitCode::FAILURE;
        }
    };
    let findings = Findings {
        opts: &opts,
        made,
        fault_seed,
        wall,
        requests,
        records: records.len(),
        outcomes: Outcomes::of(&records),
        window: Window::of(&watched, &opts),
        watched,
    };
    findings.write_json();
    findings.print();
    if !findings.equal() {
        println!(
            "\nFAILED: {} records written but the server received {requests} chat requests: \
             every request must leave exactly one record",
            records.len()
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
