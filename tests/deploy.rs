//! The cluster pieces in `deploy/`, checked offline: the Kubernetes manifests parse, their Service,
//! Indexed Job and merge Job agree with each other, and the shard's command line, with the
//! environment Kubernetes gives it, is one `agentx-host` accepts as a shard of the intended run. The
//! Slurm pieces run for real in `.ci/run` (`deploy/slurm/run-test.sh`); here the sbatch file's
//! task count and srun line are checked.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::{fixture, Run};

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path)
}

/// Every document of a YAML file as JSON, read by PyYAML through `AGENTX_PYTHON` (CI installs it);
/// `None` (with the reason printed) where no such Python is at hand.
fn yaml_docs(path: &Path) -> Option<Vec<Value>> {
    let Some(python) = std::env::var_os("AGENTX_PYTHON") else {
        eprintln!(
            "skipped: set AGENTX_PYTHON to a python with PyYAML to check the Kubernetes manifests"
        );
        return None;
    };
    let out = std::process::Command::new(python)
        .args([
            "-c",
            "import json,sys,yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d]))",
        ])
        .arg(path)
        .output()
        .unwrap();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("No module named 'yaml'") {
            eprintln!("skipped: AGENTX_PYTHON has no PyYAML");
            return None;
        }
        panic!("{} does not parse: {err}", path.display());
    }
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

fn kind<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// The value after `flag` in `args`.
fn flag<'a>(args: &'a [String], flag: &str) -> &'a str {
    let at = args
        .iter()
        .position(|a| a == flag)
        .unwrap_or_else(|| panic!("no {flag} in {args:?}"));
    &args[at + 1]
}

/// `$(VAR)` replaced by the container's `env` values, as the kubelet does.
fn expand(args: &[String], env: &HashMap<String, String>) -> Vec<String> {
    args.iter()
        .map(|a| {
            let mut s = a.clone();
            for (k, v) in env {
                s = s.replace(&format!("$({k})"), v);
            }
            s
        })
        .collect()
}

#[test]
fn kubernetes_manifests_wire_the_shards_to_the_flags() {
    let Some(docs) = yaml_docs(&deploy("kubernetes/agentx-shards.yaml")) else {
        return;
    };
    // The manifests agree with each other (the checker users run after editing them).
    let check = std::process::Command::new(std::env::var_os("AGENTX_PYTHON").unwrap())
        .arg(deploy("kubernetes/check-manifests.py"))
        .arg(deploy("kubernetes"))
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "check-manifests.py: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let job = kind(&docs, "Job", "agentx-shards");
    let n = job["spec"]["completions"].as_u64().unwrap();
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    let args = strings(&c["args"]);
    assert_eq!(args[0], "run");

    // The shard's command line, with the pod's environment and index, is a shard of the run: a
    // dry run of it (the corpus swapped for the fixture, which is at hand) plans shard 1 of N.
    let env: HashMap<String, String> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_string(),
                e["value"].as_str()?.to_string(),
            ))
        })
        .collect();
    let mut line = expand(&args, &env);
    let at = line.iter().position(|a| a == "--public-dataset").unwrap();
    line[at] = "--input-file".into();
    line[at + 1] = fixture("traces-24.jsonl").to_str().unwrap().into();
    let at = line
        .iter()
        .position(|a| a == "--output-artifact-dir")
        .unwrap();
    line[at + 1] = "artifacts".into();
    // A local corpus is never a valid submission under the default scenario: the swap needs its
    // override.
    line.extend(
        [
            "--random-seed",
            "1",
            "--unsafe-override",
            "--dry-run",
            "--json",
        ]
        .map(String::from),
    );
    let r = Run::exec(
        tempfile::tempdir().unwrap(),
        &line,
        &[("JOB_COMPLETION_INDEX", "1")],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let plan: Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(plan["shard"]["index"], 1);
    assert_eq!(plan["shard"]["count"], n);
    assert_eq!(plan["run_id"], env["AGENTX_RUN_ID"].as_str());
    let conc: u64 = flag(&args, "--concurrency").parse().unwrap();
    assert_eq!(plan["lanes"].as_array().unwrap().len() as u64, conc / n);
}

#[test]
fn the_sbatch_file_runs_one_shard_per_task_and_merges() {
    let text = std::fs::read_to_string(deploy("slurm/agentx.sbatch")).unwrap();
    assert!(text.starts_with("#!"), "an executable batch script");
    assert!(
        text.lines().any(|l| l.starts_with("#SBATCH --ntasks=")),
        "the task count is the shard count"
    );
    let srun = text
        .lines()
        .find(|l| l.trim_start().starts_with("srun "))
        .expect("an srun line");
    let body: String = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("srun "))
        .take_while(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(srun.contains("run"), "{srun}");
    for f in ["--merge-into", "--output-artifact-dir", "--concurrency"] {
        assert!(body.contains(f), "the srun line passes {f}: {body}");
    }
}
