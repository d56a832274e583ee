//! Dataset figures on the full-size synthetic corpus (949 traces by default): cold import time and peak
//! memory, warm open time, cache size against the raw JSONL, and the time to assemble a 100k-token
//! prompt. Run with `cargo bench --bench dataset`; `AGENTX_BENCH_TRACES` and `AGENTX_BENCH_DIR` change the
//! corpus size and the work directory. Imports run in child processes so their peak RSS and open time
//! are their own.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use agentx::dataset::stats::{corpus_stats, CorpusStats};
use agentx::dataset::synth::{write_corpus, SynthOptions};
use agentx::dataset::{AssistantMode, CacheBust, Dataset, OpenOptions, Placement, PromptSynth};

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn open(corpus: &Path, cache: &Path) -> Dataset {
    Dataset::open_path(
        corpus,
        &OpenOptions {
            num_dataset_entries: None,
            max_context_length: None,
            max_osl: None,
            cache_dir: Some(cache.to_owned()),
            format: None,
            block_size: None,
            trace_block_size: None,
        },
    )
    .unwrap_or_else(|e| panic!("open {}: {e}", corpus.display()))
}

/// In a child: open the corpus and print "secs rss_mib outcome".
fn child(corpus: &Path, cache: &Path) {
    let t = Instant::now();
    let ds = open(corpus, cache);
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{secs} {} {:?} {}",
        peak_rss_mib(),
        ds.outcome(),
        ds.cache_bytes()
    );
}

fn run_child(corpus: &Path, cache: &Path) -> (f64, f64, String, u64) {
    let out = Command::new(std::env::current_exe().expect("bench executable"))
        .env("AGENTX_BENCH_CHILD", "1")
        .env("AGENTX_BENCH_CORPUS", corpus)
        .env("AGENTX_BENCH_CACHE", cache)
        .output()
        .expect("spawn child");
    assert!(
        out.status.success(),
        "child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let f: Vec<&str> = text.split_whitespace().collect();
    (
        f[0].parse().unwrap(),
        f[1].parse().unwrap(),
        f[2].to_owned(),
        f[3].parse().unwrap(),
    )
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "MISSED"
    }
}

/// The synthetic corpus in the work directory (`AGENTX_BENCH_DIR`), written on the first run.
fn synthetic_corpus() -> (PathBuf, PathBuf) {
    let traces: usize = std::env::var("AGENTX_BENCH_TRACES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(949);
    let work = std::env::var_os("AGENTX_BENCH_DIR").map_or_else(
        || std::env::temp_dir().join("agentx-bench-dataset"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&work).unwrap();
    let corpus = work.join(format!("traces-{traces}-seed1.jsonl"));
    if !corpus.exists() {
        let t = Instant::now();
        let s = write_corpus(
            &SynthOptions {
                traces,
                seed: 1,
                max_isl: None,
                max_turns: None,
                context: None,
                subagents: false,
            },
            &corpus,
        )
        .unwrap();
        println!(
            "synth: {} traces, {} requests, {:.0} MiB in {:.1} s",
            s.traces,
            s.requests,
            s.bytes as f64 / 1048576.0,
            t.elapsed().as_secs_f64()
        );
    }
    (work, corpus)
}

/// The cold import (into an empty cache) and the warm open, each in a child process.
struct Imports {
    cold_s: f64,
    cold_rss: f64,
    warm_s: f64,
    warm_rss: f64,
    /// The cache entry's bytes.
    entry: u64,
}

impl Imports {
    fn measure(corpus: &Path, cache: &Path) -> Imports {
        let (cold_s, cold_rss, cold_outcome, entry) = run_child(corpus, cache);
        let (warm_s, warm_rss, warm_outcome, _) = run_child(corpus, cache);
        assert_eq!(
            (cold_outcome.as_str(), warm_outcome.as_str()),
            ("Built", "Hit")
        );
        Imports {
            cold_s,
            cold_rss,
            warm_s,
            warm_rss,
            entry,
        }
    }
}

/// The prompt figures: the turn whose input is closest to 100k tokens set up and written as JSON,
/// then a whole session.
struct Prompts {
    /// The turn and its input tokens.
    k: usize,
    isl: u32,
    setup_us: f64,
    first_us: f64,
    assemble_us: f64,
    /// The length of the body buffer after the session, for the throughput line.
    body_len: usize,
    session_turns: usize,
    session_bytes: usize,
    session_s: f64,
}

impl Prompts {
    fn measure(ds: &Dataset) -> Prompts {
        // The turn whose input is closest to 100k tokens.
        let (traj, k) = ds
            .trajectories()
            .flat_map(|t| t.turns().map(move |u| (t, u.index(), u.input_tokens())))
            .min_by_key(|&(_, _, n)| n.abs_diff(100_000))
            .map(|(t, k, _)| (t, k))
            .unwrap();
        let isl = traj.turn(k).unwrap().input_tokens();
        let synth = PromptSynth::new(42);
        let t = Instant::now();
        let conv = synth
            .conversation(traj, k, AssistantMode::Recorded)
            .unwrap();
        let setup_us = t.elapsed().as_secs_f64() * 1e6;
        let bust = CacheBust {
            placement: Placement::FirstUserPrefix,
            text: "[rid:0123456789ab]\n\n",
        };
        let mut body = Vec::new();
        let t = Instant::now();
        conv.write_messages_json(&mut body, Some(bust));
        let first_us = t.elapsed().as_secs_f64() * 1e6;
        let iters = 200;
        let t = Instant::now();
        for _ in 0..iters {
            body.clear();
            conv.write_messages_json(&mut body, Some(bust));
        }
        let assemble_us = t.elapsed().as_secs_f64() * 1e6 / f64::from(iters);
        // A whole session: every turn of the longest trajectory, advanced and written.
        let longest = ds
            .trajectories()
            .max_by_key(agentx::dataset::Trajectory::num_turns)
            .unwrap();
        let t = Instant::now();
        let mut c = synth
            .conversation(longest, 0, AssistantMode::Recorded)
            .unwrap();
        let mut bytes = 0usize;
        loop {
            body.clear();
            c.write_messages_json(&mut body, None);
            bytes += body.len();
            if c.is_final() {
                break;
            }
            c.advance(None).unwrap();
        }
        let session_s = t.elapsed().as_secs_f64();
        Prompts {
            k,
            isl,
            setup_us,
            first_us,
            assemble_us,
            body_len: body.len(),
            session_turns: longest.num_turns(),
            session_bytes: bytes,
            session_s,
        }
    }
}

fn print_corpus(ds: &Dataset, raw: u64, corpus: &Path, stats: &CorpusStats) {
    println!();
    println!(
        "corpus: {} traces, {} requests, {:.0} MiB raw JSONL ({})",
        ds.len(),
        ds.total_turns(),
        raw as f64 / 1048576.0,
        corpus.display()
    );
    println!("theoretical hit rate: set {:.2}%, longest-prefix {:.2}%; isl p50 {:.0} max {:.0}; start isl p50 {:.0} max {:.0}",
        100.0 * stats.theoretical_hit_rate_set, 100.0 * stats.theoretical_hit_rate_prefix, stats.isl.p50, stats.isl.max, stats.start_isl.p50, stats.start_isl.max);
}

fn print_imports(imports: &Imports, raw: u64) {
    let Imports {
        cold_s,
        cold_rss,
        warm_s,
        warm_rss,
        entry,
    } = *imports;
    let ratio = entry as f64 / raw as f64;
    println!();
    println!(
        "{:<40} {:>14} {:>12} {:>7}",
        "figure", "measured", "target", ""
    );
    println!(
        "{:<40} {:>12.2} s {:>10} s {:>7}",
        "cold import (child process)",
        cold_s,
        "< 60",
        verdict(cold_s < 60.0)
    );
    println!(
        "{:<40} {:>10.0} MiB {:>8} MiB {:>7}",
        "cold import peak RSS",
        cold_rss,
        "< 2048",
        verdict(cold_rss < 2048.0)
    );
    println!(
        "{:<40} {:>12.3} s {:>10} s {:>7}",
        "warm open (child process)",
        warm_s,
        "< 0.5",
        verdict(warm_s < 0.5)
    );
    println!(
        "{:<40} {:>10.0} MiB {:>12} {:>7}",
        "warm open peak RSS", warm_rss, "", ""
    );
    println!(
        "{:<40} {:>10.1} MiB {:>12} {:>7}",
        "cache entry",
        entry as f64 / 1048576.0,
        "",
        ""
    );
    println!(
        "{:<40} {:>12.2} % {:>10} % {:>7}",
        "cache / raw JSONL",
        100.0 * ratio,
        "< 25",
        verdict(ratio < 0.25)
    );
}

fn print_prompts(prompts: &Prompts, stats_s: f64) {
    let Prompts { k, isl, .. } = *prompts;
    println!(
        "{:<40} {:>11.0} us {:>12} {:>7}",
        format!("conversation setup at turn {k} ({isl} tok)"),
        prompts.setup_us,
        "",
        ""
    );
    println!(
        "{:<40} {:>11.0} us {:>12} {:>7}",
        "assemble prompt JSON, first write", prompts.first_us, "", ""
    );
    println!(
        "{:<40} {:>11.0} us {:>9} us {:>7}",
        format!("assemble {isl}-token prompt JSON (mean)"),
        prompts.assemble_us,
        "< 1000",
        verdict(prompts.assemble_us < 1000.0)
    );
    println!(
        "{:<40} {:>9.0} MB/s {:>12} {:>7}",
        "assembly throughput",
        prompts.body_len as f64 / prompts.assemble_us,
        "",
        ""
    );
    println!(
        "{:<40} {:>12.3} s {:>12} {:>7}",
        format!(
            "whole session, {} turns, {:.0} MiB",
            prompts.session_turns,
            prompts.session_bytes as f64 / 1048576.0
        ),
        prompts.session_s,
        "",
        ""
    );
    println!(
        "{:<40} {:>12.3} s {:>12} {:>7}",
        "corpus stats", stats_s, "", ""
    );
}

fn main() {
    if std::env::var_os("AGENTX_BENCH_CHILD").is_some() {
        let corpus = PathBuf::from(std::env::var_os("AGENTX_BENCH_CORPUS").expect("corpus"));
        let cache = PathBuf::from(std::env::var_os("AGENTX_BENCH_CACHE").expect("cache"));
        child(&corpus, &cache);
        return;
    }
    let (work, corpus) = synthetic_corpus();
    let raw = std::fs::metadata(&corpus).unwrap().len();
    let cache = work.join("cache");
    let _ = std::fs::remove_dir_all(&cache);

    let imports = Imports::measure(&corpus, &cache);

    let ds = open(&corpus, &cache);
    let t = Instant::now();
    let stats = corpus_stats(&ds);
    let stats_s = t.elapsed().as_secs_f64();
    let prompts = Prompts::measure(&ds);

    print_corpus(&ds, raw, &corpus, &stats);
    print_imports(&imports, raw);
    print_prompts(&prompts, stats_s);
}
