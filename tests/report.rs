//! `agentx-host report`: the bmk_agentic JSON from artifact directories on disk, through the binary,
//! and InferenceX's consumer contract (the keys and shapes `utils/summarize.py` reads) on its output.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(p: &str) -> PathBuf {
    root().join("fixtures/report").join(p)
}

/// Runs `agentx-host report --layout flat` (the seed-era keys these tests check) with a clean
/// environment plus `env`, from the repository root.
fn report(args: &[&str], env: &[(&str, &str)], home: &Path) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_agentx-host"));
    c.args(["report", "--layout", "flat"])
        .args(args)
        .current_dir(root())
        .env_clear()
        .env("HOME", home)
        .env("AGENTX_HOME", home)
        .env("HF_HUB_CACHE", home.join("hub"));
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run agentx-host")
}

const IDENTITY: &[(&str, &str)] = &[
    ("RUNNER_TYPE", "b200"),
    ("CONC", "8"),
    ("IMAGE", "img"),
    ("MODEL", "test-model"),
    ("MODEL_PREFIX", "test"),
    ("FRAMEWORK", "vllm"),
    ("PRECISION", "fp4"),
    ("TP", "4"),
    ("EP_SIZE", "1"),
    ("DP_ATTENTION", "false"),
];

fn json_of(o: &Output) -> Value {
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("stdout is one JSON document")
}

/// InferenceX's `utils/summarize.py` (docs/specs/inferencex-rows.md#summarize-keys): glob `*.json`,
/// keep objects with `is_multinode`, split off `scenario_type == "agentic-coding"`, and read its
/// table keys, scaling TTFT and TPOT to ms.
/// Returns the formatted rows, failing on a missing key or a value of the wrong type.
fn summarize(dir: &Path) -> Vec<String> {
    let mut rows = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    for f in files {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        if v.get("is_multinode").is_none() || v["scenario_type"] != json!("agentic-coding") {
            continue;
        }
        let s = |k: &str| {
            v.get(k)
                .unwrap_or_else(|| panic!("summarize.py reads {k}, absent"))
                .as_str()
                .unwrap_or_else(|| panic!("{k} must be a string"))
                .to_owned()
        };
        let n = |k: &str| {
            v.get(k)
                .unwrap_or_else(|| panic!("summarize.py reads {k}, absent"))
                .as_f64()
                .unwrap_or_else(|| panic!("{k} must be a number, got {}", v[k]))
        };
        assert!(v["is_multinode"].is_boolean());
        let mut row = format!(
            "{} | {} | {} | {} | {} |",
            s("infmax_model_prefix"),
            s("hw"),
            s("framework"),
            s("precision"),
            n("conc")
        );
        for k in [
            "mean_ttft",
            "p75_ttft",
            "p90_ttft",
            "p95_ttft",
            "mean_tpot",
            "p75_tpot",
        ] {
            row += &format!(" {:.4} |", n(k) * 1000.0);
        }
        for k in ["mean_intvty", "p75_intvty", "p90_intvty", "p95_intvty"] {
            row += &format!(" {:.4} |", n(k));
        }
        for k in ["mean_e2el", "p75_e2el", "p90_e2el", "p95_e2el"] {
            row += &format!(" {:.4} |", n(k));
        }
        for k in ["tput_per_gpu", "output_tput_per_gpu", "input_tput_per_gpu"] {
            row += &format!(" {:.4} |", n(k));
        }
        rows.push(row);
    }
    rows
}

#[test]
fn worked_example_matches_inferencex_and_passes_its_consumer() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("results");
    std::fs::create_dir_all(&out).unwrap();
    let file = out.join("agentic_b200_conc8.json");
    let o = report(
        &[
            fixture("worked").to_str().unwrap(),
            "--output",
            file.to_str().unwrap(),
        ],
        IDENTITY,
        home.path(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stdout.is_empty());
    // A fixed-seq-len result next to it is not agentic and is skipped, as summarize.py does.
    std::fs::write(
        out.join("fixed.json"),
        r#"{"is_multinode": false, "scenario_type": "fixed-seq-len"}"#,
    )
    .unwrap();
    std::fs::write(out.join("other.json"), r#"{"unrelated": 1}"#).unwrap();
    let rows = summarize(&out);
    assert_eq!(rows.len(), 1);
    assert!(
        rows[0].starts_with("test | b200 | vllm | fp4 | 8 | 34.0000 | 35.0000 | 38.0000 | 39.0000 | 18.2400 | 18.5000 |"),
        "{}",
        rows[0]
    );

    // Every number InferenceX's script wrote for these inputs
    // (docs/specs/inferencex-rows.md#worked-example), to its printed digits.
    let got: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let text = std::fs::read_to_string(fixture("worked/expected_ix.json")).unwrap();
    let want: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
    for (k, w) in &want {
        let g = &got[k];
        match (w.as_f64(), g.as_f64()) {
            (Some(w), Some(g)) => assert!(
                (w - g).abs() <= 0.006 * w.abs().max(1e-3),
                "{k}: {g} vs {w}"
            ),
            _ => assert_eq!(g, w, "{k}"),
        }
    }
}

#[test]
fn a_run_directory_with_failures_warmup_overflow_and_engines() {
    let home = tempfile::tempdir().unwrap();
    let v = json_of(&report(
        &[fixture("run").to_str().unwrap()],
        &[("TP", "2"), ("MODEL_PREFIX", "t")],
        home.path(),
    ));
    // 5 successes, 1 failure, 1 overflow in profiling; the warmup row counts nowhere.
    assert_eq!(v["num_requests_total"], json!(7));
    assert_eq!(v["num_requests_successful"], json!(5));
    assert_eq!(v["num_requests_failed"], json!(2));
    assert_eq!(v["num_warmup_requests_excluded"], json!(1));
    assert_eq!(v["context_overflow_count"], json!(1));
    assert!((v["context_overflow_rate"].as_f64().unwrap() - 1.0 / 7.0).abs() < 1e-12);
    assert!((v["mean_ttft"].as_f64().unwrap() - 0.034).abs() < 1e-12);
    assert_eq!(
        v["errors_by_type"],
        json!({"context_overflow": 1, "http_error": 1})
    );
    // Two engines' counters add up; eight engines at 50% KV usage read 50%.
    assert!((v["server_gpu_cache_hit_rate"].as_f64().unwrap() - 0.8).abs() < 1e-12);
    assert!((v["server_external_cache_hit_rate"].as_f64().unwrap() - 0.2).abs() < 1e-12);
    assert!((v["gpu_kv_cache_usage_pct"].as_f64().unwrap() - 0.5).abs() < 1e-12);
    assert_eq!(v["total_prompt_tokens"], json!(900));
    assert_eq!(v["total_generation_tokens"], json!(280));
    // The dataset named by run_summary.json supplies the trace metadata.
    assert_eq!(v["trace_metadata"]["status"], json!("available"));
    assert!((v["theoretical_cache_hit_rate"].as_f64().unwrap() - 0.5).abs() < 1e-12);
    assert!((v["mean_output_tokens_expected"].as_f64().unwrap() - 55.0).abs() < 1e-12);
    // Identity from the run where no flag or variable gives it.
    assert_eq!(v["conc"], json!(2));
    assert_eq!(v["model"], json!("test-model"));
    assert_eq!(v["seed"], json!(42));
    assert_eq!(v["submission_valid"], json!(true));
    assert!((v["tput_per_gpu"].as_f64().unwrap() - 1115.0 / 4.1 / 2.0).abs() < 1e-9);
    // Flags win over the environment.
    let v = json_of(&report(
        &[
            fixture("run").to_str().unwrap(),
            "--tp",
            "8",
            "--conc",
            "64",
        ],
        &[("TP", "2")],
        home.path(),
    ));
    assert_eq!(v["tp"], json!(8));
    assert_eq!(v["conc"], json!(64));
}

#[test]
fn missing_dataset_is_said_not_silently_null() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("art");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["profile_export.jsonl", "run_summary.json"] {
        std::fs::copy(fixture("run").join(f), dir.join(f)).unwrap();
    }
    let mut s: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run_summary.json")).unwrap())
            .unwrap();
    s["dataset"]["alias"] = json!("semianalysis_cc_traces_weka");
    std::fs::write(dir.join("run_summary.json"), s.to_string()).unwrap();
    let v = json_of(&report(&[dir.to_str().unwrap()], &[], home.path()));
    assert_eq!(v["theoretical_cache_hit_rate"], Value::Null);
    assert_eq!(v["trace_metadata"]["status"], json!("unavailable"));
    let notes = v["notes"].to_string();
    assert!(notes.contains("trace metadata unavailable"), "{notes}");
    assert!(notes.contains("semianalysis_cc_traces_weka"), "{notes}");
    assert!(
        notes.contains("server_metrics_export.json absent"),
        "{notes}"
    );
    // --dataset supplies it.
    let v = json_of(&report(
        &[
            dir.to_str().unwrap(),
            "--dataset",
            fixture("traces.jsonl").to_str().unwrap(),
        ],
        &[],
        home.path(),
    ));
    assert!((v["theoretical_cache_hit_rate"].as_f64().unwrap() - 0.5).abs() < 1e-12);
}

#[test]
fn per_run_subdirectory_layout() {
    let home = tempfile::tempdir().unwrap();
    let run0 = home.path().join("artifacts").join("run_0");
    std::fs::create_dir_all(&run0).unwrap();
    std::fs::copy(
        fixture("worked/profile_export.jsonl"),
        run0.join("profile_export.jsonl"),
    )
    .unwrap();
    let v = json_of(&report(
        &[home.path().join("artifacts").to_str().unwrap()],
        &[],
        home.path(),
    ));
    assert_eq!(v["num_requests_total"], json!(5));
}

#[test]
fn bad_input_is_named() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("art");
    std::fs::create_dir_all(&dir).unwrap();
    let good = std::fs::read_to_string(fixture("worked/profile_export.jsonl")).unwrap();
    let first = good.lines().next().unwrap();
    std::fs::write(
        dir.join("profile_export.jsonl"),
        format!("{first}\n{{\"metadata\": {{}}, \"metrics\": {{\"request_latency\": {{\"value\": [1]}}}}}}\n"),
    )
    .unwrap();
    let o = report(&[dir.to_str().unwrap()], &[], home.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "profile_export.jsonl:2: metrics.request_latency.value must be a number, got a list"
        ),
        "{err}"
    );

    let o = report(
        &[home.path().join("nothing").to_str().unwrap()],
        &[],
        home.path(),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2));
    assert!(err.contains("cannot read"), "{err}");

    let empty = home.path().join("empty");
    std::fs::create_dir_all(empty.join("sub")).unwrap();
    let o = report(&[empty.to_str().unwrap()], &[], home.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no profile_export.jsonl in"), "{err}");

    let o = report(
        &[fixture("worked").to_str().unwrap()],
        &[("TP", "four")],
        home.path(),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err.contains("--tp (or env TP): \"four\" is not a non-negative integer"),
        "{err}"
    );

    std::fs::write(dir.join("profile_export.jsonl"), good).unwrap();
    std::fs::write(dir.join("server_metrics_export.json"), "{\"metrics\": []}").unwrap();
    let o = report(&[dir.to_str().unwrap()], &[], home.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "server_metrics_export.json: `metrics` must be an object keyed by metric name"
        ),
        "{err}"
    );
}

#[test]
fn plot_writes_metrics_plots_png() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("art");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["profile_export.jsonl", "server_metrics_export.json"] {
        std::fs::copy(fixture("run").join(f), dir.join(f)).unwrap();
    }
    let o = Command::new(env!("CARGO_BIN_EXE_agentx-host"))
        .args(["plot", dir.to_str().unwrap()])
        .env_clear()
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let png = std::fs::read(dir.join("metrics_plots.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(png.len() > 10_000, "{} bytes", png.len());
}
