//! Block sizes as agentx-harness means them, and its CLI's 64-token layout on request
//! (`--trace-block-size`): the layout itself, the notes a run records under `--scenario agentx`,
//! the errors before any request, and a corpus the harness refuses (refused under `agentx`,
//! replayed with a note under the other scenarios).

use std::path::{Path, PathBuf};

use agentx::dataset::{AssistantMode, Dataset, OpenOptions, PromptSynth, Tiling};
use agentx::sim::SimConfig;
use serde_json::{json, Value};

use crate::support::{corpus_args, Run, Sim};

/// A trace in `block_size`-token blocks whose tools+system prefix is 150 tokens (5 blocks of 32, 3 of
/// 64), three turns with `ceil(in / block_size)` hash ids each.
fn trace(id: &str, block_size: u64, first_hash_ids: Option<u64>) -> Value {
    let mut next = 1u64;
    let mut ids = |n: u64| -> Vec<u64> {
        let out: Vec<u64> = (next..next + n).collect();
        next += n;
        out
    };
    let inputs = [700u64, 1000, 1400];
    let mut held: Vec<u64> = Vec::new();
    let mut requests = Vec::new();
    for (k, isl) in inputs.iter().enumerate() {
        let keep = if k == 0 {
            0
        } else {
            inputs[k - 1] / block_size
        } as usize;
        held.truncate(keep);
        let more = isl.div_ceil(block_size) - held.len() as u64;
        held.extend(ids(more));
        let mut hash_ids = held.clone();
        if k == 0 {
            if let Some(n) = first_hash_ids {
                hash_ids.truncate(n as usize);
            }
        }
        requests.push(
            json!({"t": 4.0 * k as f64, "type": "n", "model": "m", "in": isl, "out": 40,
            "hash_ids": hash_ids, "api_time": 1.0}),
        );
    }
    json!({"id": id, "models": ["m"], "block_size": block_size, "hash_id_scope": "local",
        "tool_tokens": 100, "system_tokens": 50, "requests": requests})
}

fn write_corpus(dir: &Path, traces: &[Value]) -> PathBuf {
    let path = dir.join("traces.jsonl");
    let text: String = traces.iter().fold(String::new(), |mut text, trace| {
        use std::fmt::Write;
        let _ = writeln!(text, "{trace}");
        text
    });
    std::fs::write(&path, text).unwrap();
    path
}

fn open(corpus: &Path, cache: &Path, trace_block_size: Option<u32>) -> Dataset {
    let opts = OpenOptions {
        cache_dir: Some(cache.to_owned()),
        trace_block_size,
        ..OpenOptions::default()
    };
    Dataset::open_path(corpus, &opts).unwrap()
}

/// (role initial, words) of each message of turn `k` of the first trace, laid out as the harness's
/// reconstructor lays it out.
fn layout(ds: &Dataset, k: usize) -> Vec<(char, usize)> {
    let synth = PromptSynth::new(42).with_tiling(Tiling::Reference);
    let traj = ds.trajectory(0).unwrap();
    let conv = synth
        .conversation(traj, k, AssistantMode::Recorded)
        .unwrap();
    conv.messages(None)
        .iter()
        .map(|m| {
            (
                m.role.chars().next().unwrap(),
                m.content.split_whitespace().count(),
            )
        })
        .collect()
}

#[test]
fn a_trace_is_laid_out_in_its_own_blocks_or_in_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_corpus(dir.path(), &[trace("t32", 32, None)]);
    let cache = dir.path().join("cache");
    let own = open(&corpus, &cache, None);
    let cli = open(&corpus, &cache, Some(64));
    assert_ne!(
        own.cache_key(),
        cli.cache_key(),
        "another layout, another entry"
    );
    assert_eq!(own.trajectory(0).unwrap().block_size(), 32);
    assert_eq!(cli.trajectory(0).unwrap().block_size(), 64);
    assert_eq!(cli.corpus_format().trace_block_size, Some(64));
    // Turn 0: the 150-token prefix is one system message of whole blocks: 5 of 32, or 3 of 64.
    assert_eq!(layout(&own, 0)[0], ('s', 160));
    assert_eq!(layout(&cli, 0)[0], ('s', 192));
    // Read at 64 tokens a block, the ids recorded in 32-token blocks run past `in`: the history
    // the harness CLI sends is not the recorded one.
    assert_ne!(layout(&own, 2), layout(&cli, 2));
}

/// `run --scenario agentx` against the simulator for 2 s on `corpus` with `extra`.
fn run(corpus: &Path, sim: &Sim, scenario: &str, extra: &[&str]) -> Run {
    let mut args = corpus_args("run", Some(scenario), corpus, &sim.url());
    args.extend(
        ["--concurrency", "1", "--benchmark-duration", "2"]
            .iter()
            .chain(extra)
            .map(std::string::ToString::to_string),
    );
    Run::exec(tempfile::tempdir().unwrap(), &args, &[])
}

#[test]
fn a_run_notes_the_harness_clis_layout_and_records_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = write_corpus(
        dir.path(),
        &[trace("t32", 32, None), trace("t64", 64, None)],
    );
    let sim = Sim::start(SimConfig::max());
    let own = run(&corpus, &sim, "agentx", &[]);
    assert_eq!(own.code(), 0, "{}", own.stderr());
    assert!(
        own.stderr().contains("--trace-block-size 64 reproduces"),
        "{}",
        own.stderr()
    );
    for file in ["run_manifest.json", "run_summary.json"] {
        let ds = &own.json(file)["dataset"];
        let notes = ds["harness_notes"].as_array().unwrap();
        assert_eq!(notes.len(), 1, "{file}: {ds}");
        assert_eq!(notes[0]["kind"], "block_size");
        assert_eq!(notes[0]["count"], 1);
        let message = notes[0]["message"].as_str().unwrap();
        assert!(
            message.contains("1 in 32-token blocks") && message.contains("64-token blocks"),
            "{message}"
        );
        assert!(ds.get("trace_block_size").is_none(), "{file}: {ds}");
    }
    let cli = run(&corpus, &sim, "agentx", &["--trace-block-size", "64"]);
    assert_eq!(cli.code(), 0, "{}", cli.stderr());
    for file in ["run_manifest.json", "run_summary.json"] {
        let ds = &cli.json(file)["dataset"];
        assert_eq!(ds["trace_block_size"], 64, "{file}: {ds}");
        assert!(ds.get("harness_notes").is_none(), "{file}: {ds}");
        assert_ne!(
            ds["cache_key"],
            own.json(file)["dataset"]["cache_key"],
            "{file}"
        );
    }
    // Another scenario does not mirror the harness CLI: no note.
    let v1 = run(&corpus, &sim, "agentx-v1", &[]);
    assert_eq!(v1.code(), 0, "{}", v1.stderr());
    assert!(v1.summary()["dataset"].get("harness_notes").is_none());
}

#[test]
fn a_block_size_that_leaves_a_prefix_short_is_refused_before_any_request() {
    let dir = tempfile::tempdir().unwrap();
    // 150 prefix tokens, and a first request that records 5 hash ids: enough at 32 or 64, not at 16
    // (10 blocks); the smallest size that fits is ceil(150 / 5) = 30.
    let corpus = write_corpus(
        dir.path(),
        &[trace("t64", 64, None), trace("short", 32, Some(5))],
    );
    let sim = Sim::start(SimConfig::max());
    for scenario in ["agentx", "agentx-v1"] {
        let r = run(&corpus, &sim, scenario, &["--trace-block-size", "16"]);
        assert_ne!(r.code(), 0, "{scenario}");
        let e = r.stderr();
        assert!(
            e.contains("traces.jsonl:2")
                && e.contains("trace \"short\"")
                && e.contains("requests[0].hash_ids")
                && e.contains("needs 10 hash blocks of 16 tokens, but only 5 were recorded")
                && e.contains("--trace-block-size of at least 30"),
            "{scenario}: {e}"
        );
    }
    let zero = run(&corpus, &sim, "agentx", &["--trace-block-size", "0"]);
    assert_eq!(zero.code(), 2, "{}", zero.stderr());
    assert!(
        zero.stderr().contains("--trace-block-size 0"),
        "{}",
        zero.stderr()
    );
    assert_eq!(sim.requests(), 0, "no request before the errors");
}

#[test]
fn a_corpus_the_harness_refuses_is_refused_under_agentx_and_noted_under_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let mut no_models = trace("no-models", 64, None);
    no_models.as_object_mut().unwrap().remove("models");
    // Short at its own block size (3 blocks of 64 needed, 2 recorded): the harness refuses it.
    let short = trace("short", 64, Some(2));
    let corpus = write_corpus(dir.path(), &[trace("ok", 64, None), no_models, short]);
    let sim = Sim::start(SimConfig::max());
    let refused = run(&corpus, &sim, "agentx", &[]);
    assert_ne!(refused.code(), 0);
    let e = refused.stderr();
    for says in [
        "agentx-harness 1.0.12 refuses this corpus",
        "traces.jsonl:2: trace \"no-models\": models: missing field `models`",
        "add it",
        "[harness_schema]",
        "traces.jsonl:3: trace \"short\": requests[0].hash_ids",
        "[short_first_request]",
        "fix: record the hash ids of the tools+system prefix",
    ] {
        assert!(e.contains(says), "{says:?} not in {e}");
    }
    assert_eq!(sim.requests(), 0, "refused before any request");
    let noted = run(&corpus, &sim, "agentx-v1", &[]);
    assert_eq!(noted.code(), 0, "{}", noted.stderr());
    let notes = noted.summary()["dataset"]["harness_notes"].clone();
    assert_eq!(notes[0]["kind"], "refused", "{notes}");
    assert_eq!(notes[0]["count"], 2, "{notes}");
    assert_eq!(
        noted.json("run_manifest.json")["dataset"]["harness_notes"],
        notes
    );
    // Short only in the harness CLI's 64-token layout (the defect): 150 prefix tokens are 2 blocks
    // of 128, which the 2 recorded ids hold, but 3 of 64. agentx replays it as it declares, noted.
    let defect_dir = dir.path().join("defect");
    std::fs::create_dir_all(&defect_dir).unwrap();
    let defect = write_corpus(&defect_dir, &[trace("d128", 128, Some(2))]);
    let replayed = run(&defect, &sim, "agentx", &[]);
    assert_eq!(replayed.code(), 0, "{}", replayed.stderr());
    let notes = replayed.summary()["dataset"]["harness_notes"].clone();
    assert_eq!(notes.as_array().unwrap().len(), 1, "{notes}");
    assert_eq!(notes[0]["kind"], "block_size", "{notes}");
}
