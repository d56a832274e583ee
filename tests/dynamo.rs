//! NVIDIA Dynamo's corpora end to end: the request-trace fixture (plain and as multi-member gzip) and
//! the Agentic Mooncake v1 and v2 fixtures imported, their `dataset import/stats` output, a bad line
//! refused by `dataset import` naming line and field, the session trees built from them against the
//! sessions of the source, and real session-tree replays against the simulator whose records are the
//! source's requests.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use agentx::dataset::format::Format;
use agentx::dataset::tree::corpus::{TreeCorpus, TreeOpen};
use agentx::dataset::{Dataset, OpenOptions};
use agentx::record::Phase;
use agentx::sim::SimConfig;

use crate::support::{agentx_command, corpus_args, fixture, Run, Sim};

const REQUEST_TRACE: &str = "dynamo-request-trace-10.jsonl";
const MOONCAKE_V1: &str = "agentic-mooncake-v1-6.jsonl";
const MOONCAKE_V2: &str = "agentic-mooncake-v2-6.jsonl";

/// The fixtures: (file, format, traces, requests).
const FIXTURES: [(&str, &str, usize, usize); 3] = [
    (REQUEST_TRACE, "dynamo", 2, 10),
    (MOONCAKE_V1, "agentic-mooncake", 2, 6),
    (MOONCAKE_V2, "agentic-mooncake", 2, 6),
];

fn open(path: &Path, cache: &Path) -> Dataset {
    Dataset::open_path(
        path,
        &OpenOptions {
            cache_dir: Some(cache.to_owned()),
            ..OpenOptions::default()
        },
    )
    .unwrap()
}

/// `agentx-host ARGS` with a private home; (exit code, stdout, stderr).
fn host(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = agentx_command(dir, &[]).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The request-trace fixture as two gzip members (split after line 6), in `dir`.
fn gzipped_fixture(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(fixture(REQUEST_TRACE)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let path = dir.join("dynamo-request-trace-10.jsonl.gz");
    let mut file = std::fs::File::create(&path).unwrap();
    for part in [&lines[..6], &lines[6..]] {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all((part.join("\n") + "\n").as_bytes()).unwrap();
        file.write_all(&gz.finish().unwrap()).unwrap();
    }
    path
}

/// (input, output) of each request of the source: (trace, outer index, inner index) -> lengths,
/// from the opened dataset's trees.
fn source_requests(ds: &Dataset, cache: &Path) -> BTreeMap<(String, u32, Option<u32>), (u64, u32)> {
    let trees = TreeCorpus::open(
        ds,
        &TreeOpen {
            cache_dir: Some(cache.to_owned()),
            ..TreeOpen::default()
        },
    )
    .unwrap();
    let mut out = BTreeMap::new();
    for (i, tree) in trees.trees.iter().enumerate() {
        for (s, stream) in tree.streams.iter().enumerate() {
            let traj = trees.stream(i, s);
            for (k, turn) in stream.turns.iter().enumerate() {
                let source = traj.turn(k).unwrap();
                let key = (
                    tree.trace_id.clone(),
                    turn.source_outer_idx,
                    turn.source_inner_idx,
                );
                out.insert(key, (u64::from(source.input_tokens()), turn.max_tokens));
            }
        }
    }
    out
}

#[test]
fn fixtures_import_and_stats_print_their_hit_rate() {
    let dir = tempfile::tempdir().unwrap();
    let gz = gzipped_fixture(dir.path());
    let mut sources: Vec<(PathBuf, &str, usize)> = FIXTURES
        .iter()
        .map(|&(name, format, traces, _)| (fixture(name), format, traces))
        .collect();
    sources.push((gz, "dynamo", 2));
    for (path, format, traces) in &sources {
        let p = path.to_str().unwrap();
        for args in [
            vec!["dataset", "import", p],
            vec!["dataset", "import", p, "--format", format, "--strict"],
        ] {
            let (code, out, err) = host(dir.path(), &args);
            assert_eq!(code, 0, "{args:?}: {err}");
            assert!(
                out.contains(&format!("format       {format} (block size")),
                "{out}"
            );
            assert!(out.contains("hash ids global to the corpus"), "{out}");
            assert!(out.contains(&format!("traces       {traces}\n")), "{out}");
        }
        let (code, out, err) = host(dir.path(), &["dataset", "stats", p, "--format", format]);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains(&format!("format                      {format}")),
            "{out}"
        );
        assert!(out.contains("theoretical hit rate (lcp)  "), "{out}");
        let (code, out, err) = host(dir.path(), &["dataset", "stats", p, "--json"]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["format"]["format"], *format);
        assert_eq!(v["format"]["global_hash_ids"], true);
    }
    // The request trace declares 16-token blocks: another --block-size is refused, as Dynamo does.
    let p = fixture(REQUEST_TRACE);
    let (code, _, err) = host(
        dir.path(),
        &[
            "dataset",
            "import",
            p.to_str().unwrap(),
            "--block-size",
            "64",
        ],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains(
            "dynamo-request-trace-10.jsonl:1: request.replay.trace_block_size: trace_block_size 64"
        ),
        "{err}"
    );
}

#[test]
fn a_bad_line_is_refused_naming_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(fixture(REQUEST_TRACE)).unwrap();
    let bad = dir.path().join("bad.jsonl");
    // Line 4 (R1) loses its output_tokens.
    let edited: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == 3 {
                l.replace("\"output_tokens\":16,", "")
            } else {
                l.to_owned()
            }
        })
        .collect();
    std::fs::write(&bad, edited.join("\n")).unwrap();
    let (code, _, err) = host(dir.path(), &["dataset", "import", bad.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("bad.jsonl:4: request.output_tokens: missing"),
        "{err}"
    );
    let v1 = dir.path().join("bad-v1.jsonl");
    std::fs::write(
        &v1,
        "{\"request_id\":\"r1\",\"session_id\":\"s\",\"timestamp\":0,\"input_length\":4,\"output_length\":2,\"prefix_reset\":true}\n\
         {\"request_id\":\"r2\",\"session_id\":\"s\",\"input_length\":6,\"output_length\":2,\"wait_for\":[\"r1\"],\"delay\":-10}\n",
    )
    .unwrap();
    let (code, _, err) = host(dir.path(), &["dataset", "import", v1.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bad-v1.jsonl:2: delay: is -10"), "{err}");
}

#[test]
fn the_trees_are_the_sessions_of_the_source() {
    let cache = tempfile::tempdir().unwrap();
    let ds = open(&fixture(REQUEST_TRACE), cache.path());
    assert_eq!(ds.corpus_format().format, Format::Dynamo);
    assert!(ds.global_hash_ids());
    let trees = TreeCorpus::open(
        &ds,
        &TreeOpen {
            cache_dir: Some(cache.path().to_owned()),
            ..TreeOpen::default()
        },
    )
    .unwrap();
    let lead = &trees.trees[0];
    assert_eq!(lead.trace_id, "run-1:lead");
    // (stream, parent, turns); each child session is one stream under the lead session.
    let streams: Vec<(&str, Option<usize>, usize)> = lead
        .streams
        .iter()
        .map(|s| (s.id.as_str(), s.parent, s.turns.len()))
        .collect();
    assert_eq!(
        streams,
        [
            ("run-1:lead", None, 4),
            ("run-1:lead::sa:run-1:researcher", Some(0), 2),
            ("run-1:lead::sa:run-1:watcher", Some(0), 1),
            ("run-1:lead::sa:run-1:tester", Some(0), 1),
        ]
    );
    // Who spawned whom and when: the researcher from L1 (Claude source), joined by L2 (consumer);
    // the watcher from L2 in the background; the tester from L3, joined by L4 (Dynamo's timing rule).
    let branches: Vec<(Vec<usize>, usize, Option<usize>, f64)> = lead
        .branches
        .iter()
        .map(|b| {
            (
                b.children.clone(),
                b.spawn_turn,
                b.join_turn,
                b.start_timestamp_ms,
            )
        })
        .collect();
    assert_eq!(
        branches,
        [
            (vec![1], 0, Some(1), 400.0),
            (vec![2], 1, None, 1700.0),
            (vec![3], 2, Some(3), 2300.0),
        ]
    );
    // The researcher's first turn starts 500 ms after the lead's first (recorded 1500 vs 1000).
    assert_eq!(lead.streams[1].turns[0].ts_ms, 500.0);
    assert_eq!(
        trees.trees[1].streams.len(),
        1,
        "run-2:solo has no subagent"
    );

    for (name, v2) in [(MOONCAKE_V1, false), (MOONCAKE_V2, true)] {
        let ds = open(&fixture(name), cache.path());
        assert_eq!(ds.corpus_format().format, Format::AgenticMooncake);
        assert_eq!(
            ds.trajectory(0).unwrap().block_size(),
            if v2 { 256 } else { 512 }
        );
        let trees = TreeCorpus::open(
            &ds,
            &TreeOpen {
                cache_dir: Some(cache.path().to_owned()),
                ..TreeOpen::default()
            },
        )
        .unwrap();
        let plan = &trees.trees[0];
        let ids: Vec<&str> = plan.streams.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(
            ids,
            ["plan", "plan::sa:plan:worker", "plan::sa:plan:bg"],
            "{name}"
        );
        let shape: Vec<(usize, Option<usize>)> = plan
            .branches
            .iter()
            .map(|b| (b.spawn_turn, b.join_turn))
            .collect();
        assert_eq!(shape, [(0, Some(1)), (1, None)], "{name}");
    }
}

#[test]
fn each_fixture_replays_as_its_source_requests_against_the_simulator() {
    let sim = Sim::start(SimConfig::max());
    let dir = tempfile::tempdir().unwrap();
    let gz = gzipped_fixture(dir.path());
    let mut sources: Vec<(PathBuf, &str, usize)> = FIXTURES
        .iter()
        .map(|&(name, format, _, requests)| (fixture(name), format, requests))
        .collect();
    sources.push((gz, "dynamo", 10));
    for (corpus, format, requests) in sources {
        let mut args = corpus_args("run", Some("agentx"), &corpus, &sim.url());
        args.extend(
            [
                "--concurrency",
                "2",
                "--benchmark-duration",
                "3",
                "--trace-idle-gap-cap-seconds",
                "0.01",
            ]
            .map(str::to_owned),
        );
        let loader = if format == "dynamo" {
            "dynamo"
        } else {
            "agentic_mooncake"
        };
        args.extend(["--custom-dataset-type".to_owned(), loader.to_owned()]);
        let run = Run::in_process(tempfile::tempdir().unwrap(), &args, &[]);
        assert_eq!(run.code(), 0, "{}: {}", corpus.display(), run.stderr());
        let cache = tempfile::tempdir().unwrap();
        let source = source_requests(&open(&corpus, cache.path()), cache.path());
        assert_eq!(source.len(), requests, "{}", corpus.display());
        let records: Vec<_> = run
            .records()
            .into_iter()
            .filter(|r| r.phase == Phase::Profiling && !r.cancelled)
            .collect();
        assert!(records.iter().all(|r| r.error.is_none()), "{records:?}");
        let mut seen = BTreeSet::new();
        for r in &records {
            let tree = r.tree.as_ref().expect("a session-tree record");
            let key = (
                tree.source_trace_id.clone(),
                tree.source_outer_idx.unwrap(),
                tree.source_inner_idx,
            );
            let &(input, max_tokens) = source.get(&key).unwrap_or_else(|| panic!("{key:?}"));
            assert_eq!(r.max_tokens, max_tokens, "{key:?}");
            // A later turn's prompt is the history and the new input, synthesized: it lands on the
            // recorded length within a token.
            assert!(
                r.isl.abs_diff(input) <= 1,
                "{key:?}: isl {} of {input}",
                r.isl
            );
            assert_eq!(tree.agent_depth, u8::from(key.2.is_some()), "{key:?}");
            seen.insert(key);
        }
        assert_eq!(
            seen,
            source.keys().cloned().collect::<BTreeSet<_>>(),
            "{}: every request of the source is replayed",
            corpus.display()
        );
    }
}
