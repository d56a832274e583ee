//! Session-tree figures on the synthetic with-subagents corpus (`dataset synth --subagents`, 393 traces
//! by default, like `cc-traces-weka-062126`): the time to synthesize it, to parse it, and to parse it
//! and build every trace's session tree, with the tree figures of `dataset stats`. Run with
//! `cargo bench --bench trees`; `AGENTX_BENCH_TRACES` and `AGENTX_BENCH_DIR` change the corpus size
//! and the work directory. The corpus (~560 MiB at 393 traces) is removed at the end.

use std::path::PathBuf;
use std::time::Instant;

use agentx::dataset::stats::tree_stats;
use agentx::dataset::synth::{write_corpus, SynthOptions};
use agentx::dataset::weka::{for_each_trace, SourceFiles};

fn main() {
    let traces: usize = std::env::var("AGENTX_BENCH_TRACES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(393);
    let work = std::env::var_os("AGENTX_BENCH_DIR").map_or_else(
        || std::env::temp_dir().join("agentx-bench-trees"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&work).unwrap();
    let corpus = work.join(format!("traces-{traces}-subagents-seed1.jsonl"));

    let t = Instant::now();
    let s = write_corpus(
        &SynthOptions {
            traces,
            seed: 1,
            max_isl: None,
            max_turns: None,
            context: None,
            subagents: true,
        },
        &corpus,
    )
    .unwrap();
    let synth_s = t.elapsed().as_secs_f64();
    let files = SourceFiles::Jsonl(corpus.clone());

    let t = Instant::now();
    let mut nested = 0usize;
    for_each_trace(&files, None, |tr| {
        nested += tr
            .subagent_entries
            .iter()
            .map(|e| e.requests.len())
            .sum::<usize>();
        Ok(())
    })
    .unwrap();
    let parse_s = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let ts = tree_stats(&files, |_| true).unwrap();
    let trees_s = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&corpus);

    println!(
        "corpus: {} traces, {} requests ({nested} nested), {:.0} MiB",
        s.traces,
        s.requests,
        s.bytes as f64 / 1048576.0
    );
    println!(
        "trees: {} built, {} unbuildable; streams per tree p50 {} max {}; overlap p50 {} max {}; {} branches, {} background; flat fa {}, aux {}",
        ts.trees,
        ts.unbuildable,
        ts.streams_per_tree.p50,
        ts.streams_per_tree.max,
        ts.overlap.p50,
        ts.overlap.max,
        ts.branches,
        ts.background_branches,
        ts.flat_chains.fa,
        ts.flat_chains.aux
    );
    println!();
    println!("{:<40} {:>12}", "figure", "measured");
    println!("{:<40} {:>10.2} s", "synthesize", synth_s);
    println!("{:<40} {:>10.2} s", "parse", parse_s);
    println!("{:<40} {:>10.2} s", "parse + build all trees", trees_s);
    println!(
        "{:<40} {:>10.2} s",
        "build all trees (difference)",
        (trees_s - parse_s).max(0.0)
    );
}
