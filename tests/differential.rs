//! What agentx sends against what the reference harness (agentx-harness 1.0.12, `--scenario agentx`)
//! sent on the same corpus, seed and flags: agentx replays each golden corpus against the simulator
//! with request recording, and `bench/differential.py` labels its requests and compares them with
//! the harness's committed log (fixtures/differential/README.md says how those were made). Send
//! times and the trees recycled during the run are left out (no timed assertions: how far a recycled
//! tree gets in the window is timing); everything else must differ exactly as the shape's
//! `expected-differences.txt` lists: a new difference fails, and so does a listed one that has been
//! fixed (remove its line; `AGENTX_BLESS=1` rewrites the lists from a run). Needs a Python 3
//! (`$AGENTX_PYTHON`, else `python3` on PATH) with only the standard library; skipped without one.
//!
//! Without timing at all: every request of the golden logs, warmup and profiling, laid out by the
//! `agentx` scenario's prompt tiling has the roles and per-message token counts the harness sent.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agentx::dataset::tree::corpus::{TreeCorpus, TreeOpen};
use agentx::dataset::{AssistantMode, Dataset, OpenOptions, PromptSynth, Tiling};
use agentx::sim::{SimConfig, Timing};

use crate::support::{agentx_command, fixture, Sim};

/// The golden runs' settings (fixtures/differential/README.md).
const MODEL: &str = "bench-model";
const DURATION: &str = "30";
/// The simulator's context in the Mooncake golden runs (bench/differential.py
/// `MOONCAKE_MAX_MODEL_LEN`): a row without `output_length` streams what the context leaves.
const MOONCAKE_MAX_MODEL_LEN: u64 = 4096;

fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("AGENTX_PYTHON") {
        return Some(p.into());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("python3"))
        .find(|p| p.is_file())
}

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// A JSONL corpus as one `.json` per trace, named as bench/differential.py names them (the order
/// of the files is the order lanes draw traces in).
fn split_corpus(src: &Path, dest: &Path) {
    std::fs::create_dir_all(dest).unwrap();
    let text = std::fs::read_to_string(src).unwrap();
    for (n, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let id = v["id"].as_str().unwrap();
        std::fs::write(dest.join(format!("{n:05}_{id}.json")), line).unwrap();
    }
}

/// Replays `corpus` through agentx at `concurrency` (with `extra` flags) as the golden run of `shape`
/// did and compares: a weka corpus split into one file per trace, as the harness read it.
fn differential(shape: &str, corpus: &Path, concurrency: &str, extra: &[&str]) {
    differential_of(shape, corpus, "weka_trace", concurrency, extra);
}

/// [`differential`] of a corpus of `dataset_type` (aiperf's loader name): a weka corpus is split into
/// one file per trace, any other is read as the one file it is.
fn differential_of(
    shape: &str,
    corpus: &Path,
    dataset_type: &str,
    concurrency: &str,
    extra: &[&str],
) {
    let Some(python) = python() else {
        eprintln!("skipped: no python3 (set AGENTX_PYTHON) to run bench/differential.py");
        return;
    };
    let golden = repo("fixtures/differential").join(shape);
    let dir = tempfile::tempdir().unwrap();
    let corpus_dir = if dataset_type == "weka_trace" {
        let split = dir.path().join("corpus");
        split_corpus(corpus, &split);
        split
    } else {
        corpus.to_owned()
    };
    let log = dir.path().join("requests.sim.jsonl");
    let mut cfg = SimConfig::max();
    cfg.model = MODEL.into();
    cfg.max_model_len = if dataset_type == "mooncake_trace" {
        MOONCAKE_MAX_MODEL_LEN
    } else {
        1 << 22
    };
    cfg.timing = Timing::Fixed {
        ttft: Duration::from_millis(20),
        itl: Duration::from_millis(1),
    };
    cfg.record_requests = Some(log.clone());
    let sim = Sim::start(cfg);

    let mut scenario: Vec<&str> = vec!["--scenario", "agentx"];
    let (url, corpus_arg) = (sim.url(), corpus_dir.to_str().unwrap().to_owned());
    let run_dir = dir.path().join("run");
    let rest = [
        "--url",
        &url,
        "--endpoint-type",
        "chat",
        "--streaming",
        "--model",
        MODEL,
        "--concurrency",
        concurrency,
        "--benchmark-duration",
        DURATION,
        "--input-file",
        &corpus_arg,
        "--custom-dataset-type",
        dataset_type,
        "--unsafe-override",
        "--output-artifact-dir",
        run_dir.to_str().unwrap(),
        "--stats-interval",
        "0",
    ];
    scenario.extend(rest);
    scenario.extend(extra);
    let env: &[(&str, &str)] = &[];
    let dry = agentx_command(dir.path(), env)
        .arg("run")
        .args(&scenario)
        .args(["--dry-run", "--json"])
        .output()
        .unwrap();
    assert!(
        dry.status.success(),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    let dry_path = dir.path().join("dry-run.json");
    std::fs::write(&dry_path, &dry.stdout).unwrap();
    let run = agentx_command(dir.path(), env)
        .arg("run")
        .args(&scenario)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    drop(sim);

    let script = repo("bench/differential.py");
    let labelled = dir.path().join("agentx.json");
    let norm = Command::new(&python)
        .arg(&script)
        .args(["normalize", "--tool", "agentx", "--sim-log"])
        .arg(&log)
        .arg("--run-dir")
        .arg(&run_dir)
        .arg("--dry-run")
        .arg(&dry_path)
        .arg("--corpus")
        .arg(&corpus_dir)
        .arg("-o")
        .arg(&labelled)
        .output()
        .unwrap();
    assert!(
        norm.status.success(),
        "{}",
        String::from_utf8_lossy(&norm.stderr)
    );
    // AGENTX_BLESS=1 rewrites the list from this run instead of checking it.
    let bless = std::env::var_os("AGENTX_BLESS").is_some();
    let cmp = Command::new(&python)
        .arg(&script)
        .arg("compare")
        .arg(golden.join("harness.json"))
        .arg(&labelled)
        .args(["--no-timing", "--lane-trees-only", "--show", "0"])
        .arg(if bless {
            "--write-expected"
        } else {
            "--expected-differences"
        })
        .arg(golden.join("expected-differences.txt"))
        .output()
        .unwrap();
    if bless {
        return;
    }
    let out = String::from_utf8_lossy(&cmp.stdout);
    eprintln!("{out}");
    assert!(
        cmp.status.success(),
        "agentx's requests differ from the harness's golden log other than as \
         fixtures/differential/{shape}/expected-differences.txt lists:\n{out}{}",
        String::from_utf8_lossy(&cmp.stderr)
    );
}

#[test]
fn agentx_sends_what_the_harness_sent_on_the_with_subagents_fixture() {
    differential("fixture", &fixture("traces-subagents-8.jsonl"), "8", &[]);
}

#[test]
fn agentx_sends_what_the_harness_sent_on_a_small_synthetic_corpus() {
    differential(
        "synth-12",
        &repo("fixtures/differential/synth-12/corpus.jsonl"),
        "4",
        &[],
    );
}

/// A generated corpus of `block_size`-token traces (bench/differential_corpus.py): agentx as it is
/// against the harness run as its loader intends (weka_trace `default_block_size` null).
fn generated_as_intended(block_size: u32) {
    differential(
        &format!("gen-bs{block_size}-intended"),
        &generated_corpus(block_size),
        "8",
        &[],
    );
}

/// The same corpus laid out as the harness CLI lays it out (`--trace-block-size 64`) against the
/// harness CLI as shipped.
fn generated_as_the_cli(block_size: u32) {
    differential(
        &format!("gen-bs{block_size}-cli"),
        &generated_corpus(block_size),
        "8",
        &["--trace-block-size", "64"],
    );
}

fn generated_corpus(block_size: u32) -> PathBuf {
    repo(&format!(
        "fixtures/differential/gen-bs{block_size}-intended/corpus.jsonl"
    ))
}

#[test]
fn agentx_sends_what_the_harness_as_intended_sent_in_16_token_blocks() {
    generated_as_intended(16);
}

#[test]
fn agentx_sends_what_the_harness_as_intended_sent_in_128_token_blocks() {
    generated_as_intended(128);
}

#[test]
fn agentx_sends_what_the_harness_as_intended_sent_in_512_token_blocks() {
    generated_as_intended(512);
}

#[test]
fn agentx_in_64_token_blocks_sends_what_the_harness_cli_sent_on_16_token_traces() {
    generated_as_the_cli(16);
}

#[test]
fn agentx_in_64_token_blocks_sends_what_the_harness_cli_sent_on_128_token_traces() {
    generated_as_the_cli(128);
}

#[test]
fn agentx_in_64_token_blocks_sends_what_the_harness_cli_sent_on_512_token_traces() {
    generated_as_the_cli(512);
}

/// A Mooncake corpus of single-row sessions in 32-token blocks (bench/differential_mooncake.py
/// --flat): partial last blocks, prompts past their hash ids, prefixes shared across rows, rows
/// without hash ids and rows without `output_length` (sent without a token limit), read by the
/// harness's own `mooncake_trace` loader.
#[test]
fn agentx_sends_what_the_harness_sent_on_a_flat_mooncake_corpus() {
    differential_of(
        "mooncake-flat",
        &repo("fixtures/differential/mooncake-flat/corpus.jsonl"),
        "mooncake_trace",
        "4",
        &["--isl-block-size", "32"],
    );
}

/// Every request of `shape`'s golden log against the same stream and turn laid out by agentx with
/// the reference tiling (in `trace_block_size`-token blocks when given): the roles and the words of
/// each message (marker left out, as the log has them).
fn harness_layouts_match(shape: &str, corpus: &Path, trace_block_size: Option<u32>) {
    let golden = repo("fixtures/differential")
        .join(shape)
        .join("harness.json");
    let log: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&golden).unwrap()).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let opts = OpenOptions {
        num_dataset_entries: None,
        max_context_length: None,
        max_osl: None,
        cache_dir: Some(cache.path().to_owned()),
        format: None,
        block_size: None,
        trace_block_size,
    };
    let ds = Dataset::open_path(corpus, &opts).unwrap();
    let trees = TreeCorpus::open(
        &ds,
        &TreeOpen {
            cache_dir: Some(cache.path().to_owned()),
            ..TreeOpen::default()
        },
    )
    .unwrap();
    let synth = PromptSynth::new(42).with_tiling(Tiling::Reference);
    let mut by_stream = std::collections::HashMap::new();
    for (t, tree) in trees.trees.iter().enumerate() {
        for (s, stream) in tree.streams.iter().enumerate() {
            by_stream.insert(stream.id.clone(), trees.stream(t, s));
        }
    }
    let requests = log["requests"].as_array().unwrap();
    let mut checked = 0;
    for r in requests {
        let (Some(stream), Some(turn)) = (r["stream"].as_str(), r["turn"].as_u64()) else {
            continue;
        };
        let traj = by_stream
            .get(stream)
            .unwrap_or_else(|| panic!("{shape}: no stream {stream:?} in agentx's trees"));
        let conv = synth
            .conversation(*traj, turn as usize, AssistantMode::Recorded)
            .unwrap();
        let msgs = conv.messages(None);
        let roles: String = msgs.iter().map(|m| &m.role[..1]).collect();
        let words: Vec<u64> = msgs
            .iter()
            .map(|m| m.content.split_whitespace().count() as u64)
            .collect();
        let want: Vec<u64> = r["message_tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(
            (roles.as_str(), &words),
            (r["roles"].as_str().unwrap(), &want),
            "{shape}: {stream} turn {turn} ({} request {})",
            r["phase"],
            r["seq"]
        );
        checked += 1;
    }
    assert!(
        checked * 10 >= requests.len() * 9,
        "{shape}: only {checked} of {} requests labelled",
        requests.len()
    );
}

#[test]
fn reference_tiling_lays_out_every_fixture_request_as_the_harness_did() {
    harness_layouts_match("fixture", &fixture("traces-subagents-8.jsonl"), None);
}

#[test]
fn reference_tiling_lays_out_every_synthetic_request_as_the_harness_did() {
    harness_layouts_match(
        "synth-12",
        &repo("fixtures/differential/synth-12/corpus.jsonl"),
        None,
    );
}

#[test]
fn reference_tiling_lays_out_every_generated_request_as_the_harness_did_in_either_layout() {
    for block_size in [16, 128, 512] {
        let corpus = generated_corpus(block_size);
        harness_layouts_match(&format!("gen-bs{block_size}-intended"), &corpus, None);
        harness_layouts_match(&format!("gen-bs{block_size}-cli"), &corpus, Some(64));
    }
}
