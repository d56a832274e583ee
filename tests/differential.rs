//! What agentx sends against what the reference harness (agentx-harness 1.0.12, `--scenario agentx`)
//! sent on the same corpus, seed and flags: agentx replays each golden corpus against the simulator
//! with request recording, and `bench/differential.py` labels its requests and compares them with
//! the harness's committed log (fixtures/differential/README.md says how those were made). Send
//! times and the trees recycled during the run are left out (no timed assertions: how far a recycled
//! tree gets in the window is timing); everything else must differ exactly as the shape's
//! `expected-differences.txt` lists: a new difference fails, and so does a listed one that has been
//! fixed (remove its line; `AGENTX_BLESS=1` rewrites the lists from a run). Needs a Python 3 (`$AGENTX_PYTHON`, else `python3` on PATH) with only
//! the standard library; skipped without one.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agentx::sim::{SimConfig, Timing};

use crate::support::{agentx_command, fixture, Sim};

/// The golden runs' settings (fixtures/differential/README.md).
const MODEL: &str = "bench-model";
const DURATION: &str = "30";

/// The harness's `agentx` preset as agentx-v1 flags, for an agentx without the `agentx` scenario
/// (bench/differential.py's PRESET_AS_FLAGS).
const PRESET_AS_FLAGS: [&str; 17] = [
    "--random-seed",
    "42",
    "--trajectory-start-min-ratio",
    "0.25",
    "--trajectory-start-max-ratio",
    "0.75",
    "--failed-request-threshold",
    "0.10",
    "--warmup-requests-per-lane",
    "10",
    "--agentic-warmup-grace-period",
    "1800",
    "--trace-idle-gap-cap-seconds",
    "300",
    "--use-server-token-count",
    "--benchmark-grace-period",
    "30",
];

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

/// Replays `corpus` through agentx at `concurrency` as the golden run of `shape` did and compares.
fn differential(shape: &str, corpus: &Path, concurrency: &str) {
    let Some(python) = python() else {
        eprintln!("skipped: no python3 (set AGENTX_PYTHON) to run bench/differential.py");
        return;
    };
    let golden = repo("fixtures/differential").join(shape);
    let dir = tempfile::tempdir().unwrap();
    let corpus_dir = dir.path().join("corpus");
    split_corpus(corpus, &corpus_dir);
    let log = dir.path().join("requests.sim.jsonl");
    let mut cfg = SimConfig::max();
    cfg.model = MODEL.into();
    cfg.max_model_len = 1 << 22;
    cfg.timing = Timing::Fixed {
        ttft: Duration::from_millis(20),
        itl: Duration::from_millis(1),
    };
    cfg.record_requests = Some(log.clone());
    let sim = Sim::start(cfg);

    // The `agentx` scenario once agentx has it; until then agentx-v1 with the preset as flags.
    let has_agentx = agentx_command(dir.path(), &[])
        .args(["scenario", "inspect", "agentx"])
        .output()
        .unwrap()
        .status
        .success();
    let mut scenario: Vec<&str> = if has_agentx {
        vec!["--scenario", "agentx"]
    } else {
        let mut v = vec!["agentx-v1"];
        v.extend(PRESET_AS_FLAGS);
        v
    };
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
        "weka_trace",
        "--unsafe-override",
        "--output-artifact-dir",
        run_dir.to_str().unwrap(),
        "--stats-interval",
        "0",
    ];
    scenario.extend(rest);
    let env: &[(&str, &str)] = if has_agentx {
        &[]
    } else {
        &[(
            "AGENTX_HTTP_X_SESSION_AFFINITY_FROM_CORRELATION_ID",
            "false",
        )]
    };
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
    differential("fixture", &fixture("traces-subagents-8.jsonl"), "8");
}

#[test]
fn agentx_sends_what_the_harness_sent_on_a_small_synthetic_corpus() {
    differential(
        "synth-12",
        &repo("fixtures/differential/synth-12/corpus.jsonl"),
        "4",
    );
}
