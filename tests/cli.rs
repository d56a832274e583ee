//! The `agentx-host` binary as a user meets it: output, exit codes and error messages.

use std::path::Path;
use std::process::{Command, Output};

use crate::scenario::dist;

fn agentx(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentx-host"))
        .args(args)
        .env("AGENTX_HOME", home)
        .env_remove("AGENTX_LOG")
        .output()
        .expect("run agentx-host")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn sum_of(file: &str) -> String {
    let sums = std::fs::read_to_string(dist("SHA256SUMS")).unwrap();
    sums.lines()
        .find(|l| l.ends_with(file))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_string()
}

#[test]
fn inspect_prints_the_hash_in_sha256sums() {
    let home = tempfile::tempdir().unwrap();
    let mvp = dist("agentx-mvp.wasm");
    let o = agentx(home.path(), &["scenario", "inspect", mvp.to_str().unwrap()]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains(&format!("sha256:      {}", sum_of("agentx-mvp.wasm"))),
        "{out}"
    );
    assert!(out.contains("agentx:scenario@0.1.0"), "{out}");
    assert!(out.contains("inferencex-agentx-mvp"), "{out}");

    let o = agentx(
        home.path(),
        &["scenario", "inspect", "--json", mvp.to_str().unwrap()],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["sha256"], sum_of("agentx-mvp.wasm"));
    assert_eq!(v["wit_version"], "0.1.0");
    assert!(!v["locks"].as_array().unwrap().is_empty());
}

#[test]
fn store_add_list_and_inspect_by_name_and_hash() {
    let home = tempfile::tempdir().unwrap();
    for f in ["agentx-mvp.wasm", "kvct-v01.wasm"] {
        let o = agentx(home.path(), &["scenario", "add", dist(f).to_str().unwrap()]);
        assert!(o.status.success(), "{}", text(&o).1);
    }
    let o = agentx(home.path(), &["scenario", "list"]);
    let (out, _) = text(&o);
    assert!(
        out.contains(&sum_of("agentx-mvp.wasm")) && out.contains(&sum_of("kvct-v01.wasm")),
        "{out}"
    );

    let prefix = format!("sha256:{}", &sum_of("kvct-v01.wasm")[..12]);
    let o = agentx(home.path(), &["scenario", "inspect", &prefix]);
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(text(&o).0.contains(&sum_of("kvct-v01.wasm")));

    let o = agentx(
        home.path(),
        &["scenario", "inspect", "inferencex-agentx-mvp"],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(text(&o).0.contains(&sum_of("agentx-mvp.wasm")));

    // A store entry that was tampered with is refused: it is always loaded pinned to its hash.
    let stored = home
        .path()
        .join("scenarios/sha256")
        .join(format!("{}.wasm", sum_of("agentx-mvp.wasm")));
    let mut bytes = std::fs::read(&stored).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&stored, bytes).unwrap();
    let o = agentx(
        home.path(),
        &["scenario", "inspect", "inferencex-agentx-mvp"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).1.contains("does not match its pin"),
        "{}",
        text(&o).1
    );
}

#[test]
fn bad_references_exit_2_with_a_clear_message() {
    let home = tempfile::tempdir().unwrap();
    let cases: [(&str, &str); 4] = [
        (
            "nope/missing.wasm",
            "cannot read scenario nope/missing.wasm",
        ),
        ("sha256:abc", "expected 8 to 64 hex digits"),
        (
            "no-such-scenario",
            "is neither built in (agentx (default), agentx-v1, agentx-mvp, agentx-open, agent-wire, graph-ir) nor in the store",
        ),
        ("Cargo.toml", "is not a WebAssembly file"),
    ];
    for (r, want) in cases {
        let arg = if r == "Cargo.toml" {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(r)
                .to_string_lossy()
                .into_owned()
        } else {
            r.to_string()
        };
        let o = agentx(home.path(), &["scenario", "inspect", &arg]);
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{r}: {err}");
        assert!(err.contains(want), "{r}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let pinned = format!(
        "{}@sha256:{}",
        dist("agentx-mvp.wasm").display(),
        "0".repeat(64)
    );
    let o = agentx(home.path(), &["scenario", "inspect", &pinned]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err.contains(&sum_of("agentx-mvp.wasm")) && err.contains(&"0".repeat(64)),
        "{err}"
    );
}
