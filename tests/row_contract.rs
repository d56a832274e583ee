//! InferenceX's strict AgentX row (`schemas/inferencex-agentx-row.schema.json`,
//! docs/specs/inferencex-rows.md#strict-contract): `agentx-host report` writes rows the schema
//! accepts, with a filled stability block; the schema itself rejects what the contract rejects; a
//! missing fact is an error naming the flag; `tokens.output_expected` comes from a hub dataset's one
//! snapshot only.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

/// The identity a CI job exports for InferenceX (the facts the row requires).
pub(crate) const ROW_IDENTITY: &[(&str, &str)] = &[
    ("RUNNER_TYPE", "b200"),
    ("IMAGE", "vllm/vllm-openai:v0.11.0"),
    ("MODEL_PREFIX", "test"),
    ("FRAMEWORK", "vllm"),
    ("PRECISION", "fp8"),
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn validator() -> jsonschema::Validator {
    crate::support::schema_validator("schemas/inferencex-agentx-row.schema.json")
}

/// Fails with every violation when `row` is not a valid InferenceX AgentX row.
#[track_caller]
pub(crate) fn assert_row(row: &Value) {
    let errors = crate::support::schema_errors(&validator(), row);
    assert!(
        errors.is_empty(),
        "not an InferenceX row:\n{}",
        errors.join("\n")
    );
}

fn rejected(row: &Value) -> bool {
    !validator().is_valid(row)
}

/// `agentx-host report DIR ARGS` in a clean environment plus `env`.
fn report(dir: &Path, args: &[&str], env: &[(&str, &str)], home: &Path) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_agentx-host"));
    c.arg("report")
        .arg(dir)
        .args(args)
        .current_dir(root())
        .env_clear()
        .env("HOME", home)
        .env("AGENTX_HOME", home.join("agentx"))
        .env("HF_HUB_CACHE", home.join("hub"));
    c.envs(env.iter().copied());
    c.output().expect("run agentx-host")
}

fn json_of(o: &Output) -> Value {
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("stdout is one JSON document")
}

fn run_fixture() -> PathBuf {
    root().join("fixtures/report/run")
}

#[test]
fn the_report_of_a_run_is_a_valid_row_with_stability() {
    let home = tempfile::tempdir().unwrap();
    let v = json_of(&report(
        &run_fixture(),
        &["--tp", "2"],
        ROW_IDENTITY,
        home.path(),
    ));
    assert_row(&v);
    assert_eq!(v["result_schema_version"], json!(1));
    assert_eq!(v["num_gpus"], json!(2));
    assert_eq!(v["dp_attention"], json!("false"));
    assert_eq!(v["recipe_fingerprint"], json!(""));
    assert_eq!(v["kv_offload_backend"], Value::Null);
    assert_eq!(v["allocated_cpu_dram_gb"], json!(0));
    for absent in [
        "router",
        "kv_p2p_transfer",
        "notes",
        "trace_metadata",
        "metric_definitions",
    ] {
        assert!(v.get(absent).is_none(), "{absent} in {v}");
    }
    let st = &v["request_metrics"]["stability"];
    assert_eq!(st["window_seconds"].as_f64(), Some(600.0));
    // Five successes of two traces in a few seconds: no configured duration in the fixture's
    // summary, so the measured span, under one window.
    assert_eq!(st["expected_window_count"], json!(0));
    assert_eq!(st["root_trajectory_count"], json!(2));
    assert_eq!(st["observed_ranges"], json!({}));
    assert!(v["warnings"]
        .to_string()
        .contains("no configured benchmark duration"));

    // Multinode: prefill 2 workers x TP 4, decode 1 x TP 8 = 16 GPUs; the optional keys when known.
    let fingerprint = "ab".repeat(32);
    let mut env = ROW_IDENTITY.to_vec();
    env.extend([
        ("IS_MULTINODE", "true"),
        ("DISAGG", "true"),
        ("PREFILL_NUM_WORKERS", "2"),
        ("PREFILL_TP", "4"),
        ("DECODE_NUM_WORKERS", "1"),
        ("DECODE_TP", "8"),
        ("DECODE_DP_ATTN", "true"),
        ("PREFILL_HARDWARE", "b200"),
        ("DECODE_HARDWARE", "gb200"),
        ("KV_OFFLOADING", "dram"),
        ("KV_OFFLOAD_BACKEND", "mooncake"),
        (
            "KV_OFFLOAD_BACKEND_METADATA",
            r#"{"name": "mooncake", "version": "0.3.11"}"#,
        ),
        ("TOTAL_CPU_DRAM_GB", "512"),
        (
            "ROUTER_METADATA",
            r#"{"name": "dynamo", "version": "1.3.0"}"#,
        ),
        ("KV_P2P_TRANSFER", "nixl"),
        ("RECIPE_FINGERPRINT", fingerprint.as_str()),
    ]);
    let v = json_of(&report(&run_fixture(), &[], &env, home.path()));
    assert_row(&v);
    assert_eq!(v["num_gpus"], json!(16));
    assert_eq!(
        (v["tp"].clone(), v["dp_attention"].clone()),
        (json!(12), json!("true"))
    );
    assert_eq!(v["num_prefill_gpu"], json!(8));
    assert!(v.get("pp").is_none());
    assert_eq!(
        v["kv_offload_backend"],
        json!({"name": "mooncake", "version": "0.3.11"})
    );
    assert_eq!(v["router"], json!({"name": "dynamo", "version": "1.3.0"}));
    assert_eq!(v["allocated_cpu_dram_gb"], json!(512));
}

#[test]
fn a_missing_fact_is_an_error_naming_the_flag() {
    let home = tempfile::tempdir().unwrap();
    let o = report(&run_fixture(), &[], &[("RUNNER_TYPE", "b200")], home.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    for want in [
        "cannot be written",
        "image is empty: pass --image IMAGE (or set IMAGE)",
        "--model-prefix",
        "--framework",
        "--precision",
    ] {
        assert!(err.contains(want), "no {want:?} in {err}");
    }
    assert!(!err.contains("hw is empty"), "{err}");
    // Offloading without its backend, and a fingerprint that is not one.
    let mut env = ROW_IDENTITY.to_vec();
    env.push(("KV_OFFLOADING", "dram"));
    let err = String::from_utf8_lossy(&report(&run_fixture(), &[], &env, home.path()).stderr)
        .into_owned();
    assert!(err.contains("pass --kv-offload-backend NAME"), "{err}");
    let o = report(
        &run_fixture(),
        &["--recipe-fingerprint", "XYZ"],
        ROW_IDENTITY,
        home.path(),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err.contains("--recipe-fingerprint (or env RECIPE_FINGERPRINT)"),
        "{err}"
    );
    let o = report(
        &run_fixture(),
        &["--router", r#"{"name": "x"}"#],
        ROW_IDENTITY,
        home.path(),
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("lacks a name or version"));
    // The flat layout needs none of it.
    assert!(
        report(&run_fixture(), &["--layout", "flat"], &[], home.path())
            .status
            .success()
    );
}

#[test]
fn the_schema_rejects_what_the_contract_rejects() {
    let home = tempfile::tempdir().unwrap();
    let good = json_of(&report(&run_fixture(), &[], ROW_IDENTITY, home.path()));
    assert_row(&good);
    let with = |f: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let mut v = good.clone();
        f(v.as_object_mut().unwrap());
        v
    };
    // An extra top-level key; a power metric is the one kind allowed.
    assert!(rejected(&with(&|m| {
        m.insert("notes".into(), json!([]));
    })));
    assert!(!rejected(&with(&|m| {
        m.insert("avg_power_w".into(), json!(700.5));
    })));
    // Wrong types: dp_attention a boolean, conc a string, zero GPUs, an extra accounting key.
    assert!(rejected(&with(&|m| {
        m.insert("dp_attention".into(), json!(false));
    })));
    assert!(rejected(&with(&|m| {
        m.insert("conc".into(), json!("2"));
    })));
    assert!(rejected(&with(&|m| {
        m.insert("num_gpus".into(), json!(0));
    })));
    assert!(rejected(&with(&|m| {
        m["request_accounting"]["context_overflows_unwritten"] = json!(0);
    })));
    // Optional keys are absent, not null; required ones are present.
    assert!(rejected(&with(&|m| {
        m.insert("router".into(), Value::Null);
    })));
    assert!(rejected(&with(&|m| {
        m.remove("kv_cache_pool_tokens");
    })));
    // A multinode row may not carry the single-node keys' absence the other way round.
    assert!(rejected(&with(&|m| {
        m.insert("is_multinode".into(), json!(true));
    })));
}

/// A copy of the run fixture whose aiperf aggregate names hub dataset `repo`, and a hub cache with
/// `snapshots` snapshots of it holding the fixture's traces.
fn hub_case(home: &Path, snapshots: usize) -> PathBuf {
    let dir = home.join(format!("art{snapshots}"));
    std::fs::create_dir_all(&dir).unwrap();
    for f in [
        "profile_export.jsonl",
        "run_summary.json",
        "server_metrics_export.json",
    ] {
        std::fs::copy(run_fixture().join(f), dir.join(f)).unwrap();
    }
    std::fs::write(
        dir.join("profile_export_aiperf.json"),
        json!({"request_count": {"unit": "requests", "avg": 5},
               "metadata": {"dataset": {"source_type": "public_dataset",
                                         "hf_dataset_name": "org/fake-traces"}}})
        .to_string(),
    )
    .unwrap();
    let hub = home.join("hub");
    let repo = hub.join("datasets--org--fake-traces");
    let _ = std::fs::remove_dir_all(&repo);
    for i in 0..snapshots {
        let snap = repo.join("snapshots").join(format!("rev{i}"));
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::copy(
            root().join("fixtures/report/traces.jsonl"),
            snap.join("traces.jsonl"),
        )
        .unwrap();
    }
    dir
}

#[test]
fn expected_output_lengths_come_from_the_one_hub_snapshot() {
    let home = tempfile::tempdir().unwrap();
    for (snapshots, filled) in [(0, false), (1, true), (2, false)] {
        let dir = hub_case(home.path(), snapshots);
        let v = json_of(&report(&dir, &[], ROW_IDENTITY, home.path()));
        assert_row(&v);
        let mean = &v["request_metrics"]["tokens"]["output_expected"]["mean"];
        assert_eq!(mean.is_number(), filled, "{snapshots} snapshot(s): {mean}");
        let warnings = v["warnings"].to_string();
        match snapshots {
            0 => assert!(
                warnings.contains("no snapshot of hub dataset org/fake-traces"),
                "{warnings}"
            ),
            2 => assert!(
                warnings.contains("2 snapshots of hub dataset org/fake-traces"),
                "{warnings}"
            ),
            _ => assert!((mean.as_f64().unwrap() - 55.0).abs() < 1e-9, "{mean}"),
        }
    }
    // A local corpus (no hub name): the run summary's dataset still gives the theoretical rate.
    let v = json_of(&report(&run_fixture(), &[], ROW_IDENTITY, home.path()));
    let rate = v["request_metrics"]["cache"]["theoretical_cache_hit_rate"].as_f64();
    assert!((rate.unwrap() - 0.5).abs() < 1e-9, "{rate:?}");
}
