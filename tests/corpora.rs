//! Corpus formats other than weka: the Mooncake and TraceLab fixtures imported into the same cache,
//! their `dataset import/stats/inspect` output, bad lines named by file:line and field, detection,
//! the global hash-id scope of Mooncake traces in the synthesized text, and real replays of each
//! imported fixture against the simulator.

use std::path::Path;

use agentx::dataset::format::Format;
use agentx::dataset::tree::corpus::{TreeCorpus, TreeOpen};
use agentx::dataset::{AssistantMode, Dataset, OpenOptions, PromptSynth};
use agentx::record::Phase;
use agentx::sim::SimConfig;

use crate::support::{agentx_command, corpus_args, fixture, Run, Sim};

const MOONCAKE: &str = "mooncake-12.jsonl";
const TRACELAB: &str = "tracelab-12.jsonl";

fn open(name: &str, cache: &Path, format: Option<Format>) -> Dataset {
    Dataset::open_path(
        &fixture(name),
        &OpenOptions {
            cache_dir: Some(cache.to_owned()),
            format,
            ..OpenOptions::default()
        },
    )
    .unwrap()
}

/// The messages JSON of turn `k` of trace `id`.
fn messages(ds: &Dataset, synth: &PromptSynth, id: &str, k: usize) -> String {
    let c = synth
        .conversation(ds.find(id).unwrap(), k, AssistantMode::Recorded)
        .unwrap();
    let mut out = Vec::new();
    c.write_messages_json(&mut out, None);
    String::from_utf8(out).unwrap()
}

/// `agentx-host ARGS` with a private home; (exit code, stdout, stderr).
fn host(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = agentx_command(dir, env).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn mooncake_lines_become_sessions_whose_equal_hash_ids_are_equal_text() {
    let cache = tempfile::tempdir().unwrap();
    let ds = open(MOONCAKE, cache.path(), None);
    assert_eq!(ds.corpus_format().format, Format::Mooncake);
    assert_eq!(ds.corpus_format().block_size, Some(512));
    assert!(ds.global_hash_ids());
    // Nine single-request sessions and chat-a's three turns.
    assert_eq!(ds.len(), 10);
    assert_eq!(ds.total_turns(), 12);
    let chat = ds.find("chat-a").unwrap();
    assert_eq!(chat.num_turns(), 3);
    let t: Vec<f64> = chat.turns().map(|t| t.t()).collect();
    assert_eq!(t, [0.0, 2.67, 5.91]);
    assert_eq!(chat.turn(1).unwrap().think_time(), Some(1.5));
    assert_eq!(chat.turn(2).unwrap().lcp_with_previous(), 4);

    let synth = PromptSynth::new(42);
    // Lines 1 and 12 are the same request in two sessions: the same text.
    let first = messages(&ds, &synth, "line-1", 0);
    assert_eq!(first, messages(&ds, &synth, "line-12", 0));
    // Lines 1 and 4 share blocks 0 and 1 (1024 words) and then differ.
    let other = messages(&ds, &synth, "line-4", 0);
    let words = |s: &str| {
        s.split_whitespace()
            .take(1024)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(words(&first), words(&other));
    assert_ne!(
        first[..first.len().min(other.len())],
        other[..first.len().min(other.len())]
    );
    // Another seed, other text.
    assert_ne!(first, messages(&ds, &PromptSynth::new(43), "line-1", 0));
    // The recorded length is kept: 1655 words.
    let body: serde_json::Value = serde_json::from_str(&first).unwrap();
    let n: usize = body
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().split_whitespace().count())
        .sum();
    assert_eq!(n, 1655);

    // A second open maps the entry; --block-size is part of the key.
    let again = open(MOONCAKE, cache.path(), Some(Format::Mooncake));
    assert_eq!(again.cache_key(), ds.cache_key());
    let small = Dataset::open_path(
        &fixture(MOONCAKE),
        &OpenOptions {
            cache_dir: Some(cache.path().to_owned()),
            block_size: Some(256),
            ..OpenOptions::default()
        },
    )
    .unwrap();
    assert_ne!(small.cache_key(), ds.cache_key());
}

#[test]
fn weka_text_stays_keyed_by_trace() {
    let cache = tempfile::tempdir().unwrap();
    let ds = open("traces-24.jsonl", cache.path(), None);
    assert_eq!(ds.corpus_format().format, Format::Weka);
    assert!(!ds.global_hash_ids());
    assert!(ds.trajectories().all(|t| !t.global_hash_ids()));
}

#[test]
fn tracelab_rounds_become_traces_with_their_subagent_nested() {
    let cache = tempfile::tempdir().unwrap();
    let ds = open(TRACELAB, cache.path(), None);
    let spec = ds.corpus_format();
    assert_eq!(spec.format, Format::Tracelab);
    assert_eq!(spec.block_size, Some(64));
    assert!(!ds.global_hash_ids());
    // The child session nests in its parent: three traces, not four.
    let ids: Vec<&str> = ds.trajectories().map(|t| t.id()).collect();
    assert_eq!(
        ids,
        ["claude_6f1c2a0e-a", "codex_91d3-c", "claude_6f1c2a0e-d"]
    );
    let a = ds.find("claude_6f1c2a0e-a").unwrap();
    assert_eq!(a.num_turns(), 4);
    assert_eq!(a.subagents(), 1);
    assert_eq!(ds.subagents_ignored(), 1);
    // Round 1 reuses round 0's 46 whole blocks (prefix 3000 of 3400 tokens).
    let r1 = a.turn(1).unwrap();
    assert_eq!(
        (r1.input_tokens(), r1.num_hash_ids(), r1.lcp_with_previous()),
        (3400, 53, 46)
    );
    assert_eq!(r1.think_time(), Some(1.0));
    assert_eq!(a.turn(0).unwrap().stop(), "tool_use");

    let trees = TreeCorpus::open(
        &ds,
        &TreeOpen {
            cache_dir: Some(cache.path().to_owned()),
            ..TreeOpen::default()
        },
    )
    .unwrap();
    assert_eq!(trees.trees.len(), 3);
    assert_eq!(
        trees.trees[0].streams.len(),
        2,
        "the parent and its subagent"
    );
    assert_eq!(trees.stream(0, 1).num_turns(), 3);

    // Without the join every session is a trace of its own.
    let flat_cache = tempfile::tempdir().unwrap();
    let out = host(
        flat_cache.path(),
        &[
            "dataset",
            "import",
            fixture(TRACELAB).to_str().unwrap(),
            "--json",
        ],
        &[("AIPERF_DATASET_TRACELAB_SUBAGENT_JOIN", "false")],
    );
    assert_eq!(out.0, 0, "{}", out.2);
    let v: serde_json::Value = serde_json::from_str(&out.1).unwrap();
    assert_eq!(v["traces"], 4);
    assert_eq!(v["format"]["tracelab"]["subagents"], false);
}

#[test]
fn import_stats_and_inspect_take_a_format() {
    let dir = tempfile::tempdir().unwrap();
    for (name, format, traces) in [(MOONCAKE, "mooncake", "10"), (TRACELAB, "tracelab", "3")] {
        let path = fixture(name);
        let p = path.to_str().unwrap();
        for args in [
            vec!["dataset", "import", p],
            vec!["dataset", "import", p, "--format", format],
        ] {
            let (code, out, err) = host(dir.path(), &args, &[]);
            assert_eq!(code, 0, "{err}");
            assert!(
                out.contains(&format!("format       {format} (block size")),
                "{out}"
            );
            assert!(out.contains(&format!("traces       {traces}\n")), "{out}");
        }
        let (code, out, err) = host(dir.path(), &["dataset", "stats", p], &[]);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains(&format!("format                      {format}")),
            "{out}"
        );
        let (code, out, err) = host(dir.path(), &["dataset", "stats", p, "--json"], &[]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["format"]["format"], format);
        let (code, out, err) = host(dir.path(), &["dataset", "inspect", p, "--index", "0"], &[]);
        assert_eq!(code, 0, "{err}");
        assert!(!out.is_empty());
        let (code, out, err) = host(
            dir.path(),
            &["dataset", "inspect", p, "--index", "0", "--turn", "0"],
            &[],
        );
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("\"role\""), "{out}");
    }
    // A weka fixture read as mooncake says what is wrong, where.
    let weka = fixture("traces-24.jsonl");
    let (code, _, err) = host(
        dir.path(),
        &[
            "dataset",
            "import",
            weka.to_str().unwrap(),
            "--format",
            "mooncake",
        ],
        &[],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("traces-24.jsonl:1: input_length: missing"),
        "{err}"
    );
}

#[test]
fn bad_lines_are_named_by_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let cases = [
        (
            write(
                "m-bad.jsonl",
                "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2]}\n\
                 {\"timestamp\": 1, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2, 3]}\n",
            ),
            "m-bad.jsonl:2: hash_ids: 3 hash ids of 512 tokens",
        ),
        (
            write(
                "m-type.jsonl",
                "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5}\n\n\
                 {\"timestamp\": 1, \"input_length\": [600], \"output_length\": 5}\n",
            ),
            "m-type.jsonl:3: input_length: must be a number",
        ),
        (
            write(
                "t-bad.jsonl",
                &format!(
                    "{}\n{}\n",
                    r#"{"session_id":"s","round_index":0,"input_tokens_total":10,"prefix_tokens":0,"newly_append_tokens":10,"timing_events":[]}"#,
                    r#"{"session_id":"s","round_index":1,"input_tokens_total":10,"prefix_tokens":0,"newly_append_tokens":10,"timing_events":[{"event_type":"text","timestamp":"yesterday"}]}"#
                ),
            ),
            "t-bad.jsonl:2: timing_events[0].timestamp: \"yesterday\" is not an ISO-8601 time",
        ),
        (
            write("unknown.jsonl", "{\"prompt\": \"hi\", \"n\": 1}\n"),
            "the formats are weka, mooncake, tracelab",
        ),
    ];
    for (path, want) in cases {
        let (code, out, err) = host(
            dir.path(),
            &["dataset", "import", path.to_str().unwrap()],
            &[],
        );
        assert_eq!(code, 2, "{out}{err}");
        assert!(err.contains(want), "{want:?} not in {err}");
    }
    // Lax values import with warnings; --strict refuses them, naming the line.
    let lax = write(
        "m-lax.jsonl",
        "{\"timestamp\": 0, \"input_length\": \"600\", \"output_length\": 5, \"hash_ids\": [1, 2]}\n",
    );
    let (code, out, err) = host(
        dir.path(),
        &["dataset", "import", lax.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("coerced_number"), "{out}");
    let (code, _, err) = host(
        dir.path(),
        &["dataset", "import", lax.to_str().unwrap(), "--strict"],
        &[],
    );
    assert_eq!(code, 2);
    assert!(err.contains("m-lax.jsonl:1"), "{err}");
}

/// A short run of `scenario` on fixture `corpus` against the simulator.
fn replay(scenario: &str, corpus: &str, url: &str) -> Run {
    let mut args = corpus_args("run", Some(scenario), &fixture(corpus), url);
    args.extend(["--concurrency", "2", "--benchmark-duration", "3"].map(str::to_owned));
    Run::in_process(tempfile::tempdir().unwrap(), &args, &[])
}

fn check_replay(r: &Run, corpus: &str) {
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let recs = r.records();
    assert!(
        recs.iter().any(|x| x.phase == Phase::Profiling),
        "no profiling records"
    );
    assert!(recs.iter().all(|x| x.error.is_none()), "{recs:?}");
    assert!(r.artifacts().join("run_summary.json").exists());
    let summary = r.summary();
    let text = summary.to_string();
    assert!(
        text.contains(corpus),
        "the summary names the corpus: {text}"
    );
}

#[test]
fn mooncake_fixture_replays_against_the_simulator() {
    let sim = Sim::start(SimConfig::max());
    let r = replay("agentx-mvp", MOONCAKE, &sim.url());
    check_replay(&r, MOONCAKE);
    let ids: std::collections::HashSet<String> =
        r.records().into_iter().map(|x| x.trace_id).collect();
    assert!(!ids.is_empty());
    assert!(
        ids.iter()
            .all(|id| id == "chat-a" || id.starts_with("line-")),
        "{ids:?}"
    );
}

/// `run` takes aiperf's loader name and block size: the same Mooncake file at 16 tokens a block is
/// another cache entry, replayed as well; an unknown loader or a zero block size is refused.
#[test]
fn run_takes_the_loader_name_and_the_block_size() {
    let sim = Sim::start(SimConfig::max());
    let key = |r: &Run| {
        r.json("run_manifest.json")["dataset"]["cache_key"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let default = replay("agentx-mvp", MOONCAKE, &sim.url());
    check_replay(&default, MOONCAKE);
    let mut args = corpus_args("run", Some("agentx-mvp"), &fixture(MOONCAKE), &sim.url());
    args.extend(
        [
            "--concurrency",
            "2",
            "--benchmark-duration",
            "3",
            "--custom-dataset-type",
            "mooncake_trace",
            "--isl-block-size",
            "16",
        ]
        .map(str::to_owned),
    );
    let small = Run::in_process(tempfile::tempdir().unwrap(), &args, &[]);
    check_replay(&small, MOONCAKE);
    assert_ne!(key(&small), key(&default), "block size 16 is another entry");

    for (flag, value, says) in [
        (
            "--custom-dataset-type",
            "sharegpt",
            "weka_trace, mooncake_trace, tracelab",
        ),
        ("--isl-block-size", "0", "--isl-block-size 0"),
    ] {
        let mut bad = corpus_args("run", Some("agentx-mvp"), &fixture(MOONCAKE), &sim.url());
        bad.extend([flag, value, "--dry-run"].map(str::to_owned));
        let r = Run::in_process(tempfile::tempdir().unwrap(), &bad, &[]);
        assert_eq!(r.code(), 2, "{}", r.stderr());
        assert!(r.stderr().contains(says), "{}", r.stderr());
    }
}

#[test]
fn every_built_in_tree_scenario_replays_both_formats() {
    let sim = Sim::start(SimConfig::max());
    for scenario in ["agentx", "agentx-v1"] {
        let r = replay(scenario, MOONCAKE, &sim.url());
        check_replay(&r, MOONCAKE);
    }
    let r = replay("agentx-mvp", TRACELAB, &sim.url());
    check_replay(&r, TRACELAB);
}

#[test]
fn tracelab_fixture_replays_as_session_trees_against_the_simulator() {
    let sim = Sim::start(SimConfig::max());
    let r = replay("agentx", TRACELAB, &sim.url());
    check_replay(&r, TRACELAB);
    let recs = r.records();
    assert!(
        recs.iter()
            .any(|x| x.tree.as_ref().is_some_and(|t| t.agent_depth == 1)),
        "the subagent stream is replayed"
    );
}

/// A Mooncake row without `output_length` is sent without a token limit, as agentx-harness sends
/// it; the rows with one keep theirs. Under agentx-mvp (single-stream sessions of two turns or more)
/// and agentx (session trees).
#[test]
fn a_mooncake_row_without_output_length_is_sent_without_a_limit() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("no-limit.jsonl");
    std::fs::write(
        &corpus,
        "{\"session_id\": \"a\", \"input_length\": 40, \"output_length\": 6, \"hash_ids\": [1]}\n\
         {\"session_id\": \"a\", \"delay\": 100, \"input_length\": 50, \"hash_ids\": [1, 2]}\n\
         {\"session_id\": \"b\", \"input_length\": 40, \"output_length\": 6, \"hash_ids\": [3]}\n\
         {\"session_id\": \"b\", \"delay\": 100, \"input_length\": 50, \"hash_ids\": [3, 4]}\n",
    )
    .unwrap();
    for scenario in ["agentx-mvp", "agentx"] {
        let log = dir.path().join(format!("{scenario}.requests.jsonl"));
        let mut cfg = SimConfig::max();
        cfg.record_requests = Some(log.clone());
        let sim = Sim::start(cfg);
        let mut args = corpus_args("run", Some(scenario), &corpus, &sim.url());
        args.extend(
            [
                "--isl-block-size",
                "32",
                "--concurrency",
                "2",
                "--benchmark-duration",
                "2",
            ]
            .map(str::to_owned),
        );
        let r = Run::in_process(tempfile::tempdir().unwrap(), &args, &[]);
        assert_eq!(r.code(), 0, "{scenario}: {}", r.stderr());
        drop(sim);
        // (prompt tokens, token limit) of every request the simulator saw.
        let sent: Vec<(u64, Option<u64>)> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .map(|v| {
                let limit = v["max_completion_tokens"]
                    .as_u64()
                    .or(v["max_tokens"].as_u64());
                (v["prompt_tokens"].as_u64().unwrap(), limit)
            })
            .collect();
        assert!(
            sent.iter().any(|(_, l)| l.is_none()),
            "{scenario}: {sent:?}"
        );
        assert!(
            sent.iter().any(|(_, l)| l.is_some()),
            "{scenario}: {sent:?}"
        );
        // Only the 50-token turns go without a limit (the 40-token ones are sent with 6, or with the
        // scenario's warmup limit).
        assert!(
            sent.iter().all(|(p, l)| l.is_some() || *p >= 50),
            "{scenario}: {sent:?}"
        );
    }
}
