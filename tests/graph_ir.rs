//! `dataset validate|stats --format graph-ir` on the aiperf Agent Graph IR fixtures: exit codes,
//! the printed figures and refusals, and `dataset import|inspect` and `run --dry-run` refusing a
//! graph-ir workload (`run` replays it: `graph_run.rs`).

use std::path::Path;

use crate::support::{fixture, Run};

fn agentx(args: &[&str]) -> Run {
    Run::in_process(tempfile::tempdir().unwrap(), args, &[])
}

fn graph_fixture(name: &str) -> String {
    fixture("graph-ir").join(name).display().to_string()
}

#[test]
fn validate_accepts_the_valid_fixtures_and_counts_what_they_hold() {
    for (name, says) in [
        (
            "agentic-doc-minimal.jsonl",
            "valid graph-ir workload: 1 traces, 1 graph(s), 1 nodes, 0 warning(s)",
        ),
        (
            "worked-example.json",
            "valid graph-ir workload: 1 traces, 1 graph(s), 3 nodes, 0 warning(s)",
        ),
        (
            "review-two-traces.json",
            "valid graph-ir workload: 2 traces, 1 graph(s), 4 nodes, 0 warning(s)",
        ),
    ] {
        let run = agentx(&[
            "dataset",
            "validate",
            "--format",
            "graph-ir",
            &graph_fixture(name),
        ]);
        assert_eq!(run.code(), 0, "{name}: {}", run.stderr());
        assert!(run.stdout().contains(says), "{name}: {}", run.stdout());
    }
    let json = agentx(&[
        "dataset",
        "validate",
        "--format",
        "graph-ir",
        "--json",
        &graph_fixture("worked-example.json"),
    ]);
    let doc: serde_json::Value = serde_json::from_str(&json.stdout()).unwrap();
    assert_eq!(
        (doc["valid"].as_bool(), doc["nodes"].as_u64()),
        (Some(true), Some(3))
    );
}

#[test]
fn validate_refuses_every_invalid_fixture_with_exit_code_2_and_its_place() {
    let dir = fixture("invalid/graph-ir");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            continue;
        }
        let run = agentx(&[
            "dataset",
            "validate",
            "--format",
            "graph-ir",
            path.to_str().unwrap(),
        ]);
        let name = path.file_name().unwrap().to_str().unwrap();
        assert_eq!(run.code(), 2, "{name}: {}", run.stdout());
        assert!(run.stderr().contains(name), "{name}: {}", run.stderr());
        checked += 1;
    }
    assert_eq!(checked, 21);

    // A validator refusal lists every finding with its rule, place and fix.
    let cycle = dir.join("05-anchor-from-start.json").display().to_string();
    let run = agentx(&["dataset", "validate", "--format", "graph-ir", &cycle]);
    let err = run.stderr();
    assert!(
        err.contains("the graph corpus is refused: 2 error(s), 0 warning(s)"),
        "{err}"
    );
    assert!(err.contains("05-anchor-from-start.json: graph.edges[START->a]: error rule-54: edge 'START' -> 'a' is start-anchored"), "{err}");
    assert!(
        err.contains("error rule-55:") && err.contains("(fix: Use min_start_delay_us"),
        "{err}"
    );
    // --json puts the findings on stdout, still exit code 2.
    let run = agentx(&[
        "dataset", "validate", "--format", "graph-ir", "--json", &cycle,
    ]);
    assert_eq!(run.code(), 2);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout()).unwrap();
    assert_eq!(doc["valid"], false);
    assert_eq!(doc["findings"][0]["rule"], "rule-54");
    assert_eq!(
        doc["findings"][0]["location"],
        format!("{cycle}: graph.edges[START->a]")
    );
    // A decode error names the JSONL line and the field.
    let inf = dir.join("11-infinite-delay.jsonl").display().to_string();
    let run = agentx(&["dataset", "validate", "--format", "graph-ir", &inf]);
    assert!(
        run.stderr().contains("11-infinite-delay.jsonl:1:"),
        "{}",
        run.stderr()
    );
    assert!(
        run.stderr().contains("min_start_delay_us must be finite"),
        "{}",
        run.stderr()
    );
}

#[test]
fn stats_print_the_graph_figures_and_the_in_trace_hit() {
    let run = agentx(&[
        "dataset",
        "stats",
        "--format",
        "graph-ir",
        "--block-size",
        "4",
        &graph_fixture("review-two-traces.json"),
    ]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let out = run.stdout();
    for line in [
        "format                      graph-ir (block size 4, word model)",
        "traces                      2",
        "nodes                       4",
        "edges                       6",
        "in-edges by anchor          start 1, completion 2, dispatch 1, first-token 0",
        "fan-in nodes                1",
        "channels                    overwrite 3, add_messages 1",
        "recorded starts             none",
        // Per trace (in 4-word blocks): triage's system prompt and history seed (24 words in
        // review-a, 27 in review-b) open search's and patch's prompts too: 6 of their blocks hit
        // each; the replies they read (triage's 8 tokens, search's 16) are 48 dynamic tokens.
        "prompt tokens               271 (48 dynamic, by the producers' max_tokens)",
        "theoretical hit rate        37.50% (24 of 64 blocks seen earlier in their trace)",
        "warnings                    0",
    ] {
        assert!(out.contains(line), "{line:?} not in {out}");
    }
    let json = agentx(&[
        "dataset",
        "stats",
        "--format",
        "graph-ir",
        "--block-size",
        "4",
        "--json",
        &graph_fixture("review-two-traces.json"),
    ]);
    let doc: serde_json::Value = serde_json::from_str(&json.stdout()).unwrap();
    let (hits, blocks) = (
        doc["hit_blocks"].as_u64().unwrap(),
        doc["blocks"].as_u64().unwrap(),
    );
    assert!(hits > 0 && hits < blocks, "{doc}");
    assert!(
        out.contains(&format!(
            "({hits} of {blocks} blocks seen earlier in their trace)"
        )),
        "{out}"
    );
    // Default block size: 64.
    let run = agentx(&[
        "dataset",
        "stats",
        "--format",
        "graph-ir",
        &graph_fixture("worked-example.json"),
    ]);
    assert!(
        run.stdout().contains("(block size 64, word model)"),
        "{}",
        run.stdout()
    );
}

#[test]
fn import_inspect_and_a_dry_run_refuse_a_graph_ir_workload() {
    let file = graph_fixture("worked-example.json");
    for (args, said) in [
        (
            vec![
                "run",
                "--input-file",
                &file,
                "--format",
                "graph-ir",
                "--dry-run",
            ],
            "a graph-ir workload has none",
        ),
        (
            vec!["dataset", "import", "--format", "graph-ir", &file],
            "`agentx-host run --format graph-ir FILE` replays it",
        ),
        (
            vec!["dataset", "inspect", "--format", "graph-ir", &file],
            "`agentx-host run --format graph-ir FILE` replays it",
        ),
    ] {
        let run = agentx(&args);
        assert_eq!(run.code(), 2, "{args:?}: {}", run.stdout());
        assert!(run.stderr().contains(said), "{args:?}: {}", run.stderr());
    }
    let run = agentx(&[
        "dataset",
        "validate",
        "--format",
        "graph-ir",
        "--num-dataset-entries",
        "1",
        &file,
    ]);
    assert_eq!(run.code(), 2);
    assert!(
        run.stderr().contains("a graph-ir workload is read whole"),
        "{}",
        run.stderr()
    );
}

#[test]
fn validate_checks_a_session_trace_corpus_through_its_import() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let corpus = fixture("mooncake-12.jsonl");
    let args = [
        "dataset",
        "validate",
        corpus.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ];
    let run = agentx(&args);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    assert!(
        run.stdout()
            .contains("valid mooncake corpus: 10 traces, 12 requests"),
        "{}",
        run.stdout()
    );
    assert!(Path::new(&cache).is_dir());
}
