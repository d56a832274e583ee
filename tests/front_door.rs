//! The front door as a new user meets it: a failed start never touches an earlier run, runs without
//! `--output-artifact-dir` never overwrite each other, no command panics on a closed pipe, URLs as
//! users write them, a concurrency list names `sweep`, `replay` from elsewhere, and the built-in
//! scenarios in `scenario list`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use agentx::sim::SimConfig;
use serde_json::Value;

use crate::support::{agentx_command, fixture, fixture_args, Run, Sim};

/// Every file under `dir` with its bytes (symlinks as their targets).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.file_type().is_symlink() {
                let to = std::fs::read_link(&p).unwrap();
                out.insert(p, to.into_os_string().into_encoded_bytes());
            } else if meta.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// A short real run of agentx-mvp against `url` in `work`, with `extra` flags.
fn short_run(work: &Path, url: &str, extra: &[&str]) -> std::process::Output {
    let mut args = fixture_args("run", url);
    args.extend(
        [
            "--concurrency",
            "2",
            "--benchmark-duration",
            "1",
            "--ignore-trace-delays",
        ]
        .map(String::from),
    );
    args.extend(extra.iter().map(std::string::ToString::to_string));
    agentx_command(work, &[]).args(&args).output().unwrap()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn dead_url() -> String {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}")
}

#[test]
fn a_failed_start_leaves_an_earlier_run_byte_identical() {
    let sim = Sim::start(SimConfig::max());
    let work = tempfile::tempdir().unwrap();
    let out = short_run(work.path(), &sim.url(), &["--output-artifact-dir", "prev"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let prev = work.path().join("prev");
    assert!(prev.join("report.html").is_file());
    let before = snapshot(&prev);

    // Without --overwrite: refused before anything loads, naming the flag.
    let o = short_run(work.path(), &sim.url(), &["--output-artifact-dir", "prev"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("holds another run") && e.contains("--overwrite"),
        "{e}"
    );
    assert_eq!(snapshot(&prev), before);

    // With --overwrite, a start that fails at pre-flight (nothing listens) or at the simulator's
    // preset touches nothing either.
    let dead = dead_url();
    let o = short_run(
        work.path(),
        &dead,
        &["--output-artifact-dir", "prev", "--overwrite"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("cannot reach the server"),
        "{}",
        stderr(&o)
    );
    assert_eq!(snapshot(&prev), before);
    let o = agentx_command(work.path(), &[])
        .args([
            "run",
            "agentx-mvp",
            "--sim-preset",
            "bogus",
            "--output-artifact-dir",
            "prev",
            "--overwrite",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--sim-preset bogus"), "{}", stderr(&o));
    assert_eq!(snapshot(&prev), before);

    // A run that starts replaces the earlier run's files: no stale export stays beside it.
    std::fs::write(prev.join("notes.txt"), "mine").unwrap();
    let o = short_run(
        work.path(),
        &sim.url(),
        &["--output-artifact-dir", "prev", "--overwrite"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let m1: Value = serde_json::from_slice(&before[&prev.join("run_manifest.json")]).unwrap();
    let m2: Value =
        serde_json::from_slice(&std::fs::read(prev.join("run_manifest.json")).unwrap()).unwrap();
    assert_ne!(m1["run_id"], m2["run_id"]);
    assert_eq!(
        std::fs::read_to_string(prev.join("notes.txt")).unwrap(),
        "mine"
    );
}

#[test]
fn runs_without_an_output_flag_get_their_own_directories_and_latest() {
    let sim = Sim::start(SimConfig::max());
    let work = tempfile::tempdir().unwrap();
    for _ in 0..2 {
        let o = short_run(work.path(), &sim.url(), &[]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            out.contains("agentx-host report"),
            "a run ends with where to look: {out}"
        );
    }
    let art = work.path().join("artifacts");
    let mut runs: Vec<String> = std::fs::read_dir(&art)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "latest")
        .collect();
    runs.sort();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(
        runs.iter().all(|n| n.starts_with("inferencex-agentx-mvp-")),
        "{runs:?}"
    );
    let latest = std::fs::read_link(art.join("latest")).unwrap();
    let m: Value =
        serde_json::from_slice(&std::fs::read(art.join("latest/run_manifest.json")).unwrap())
            .unwrap();
    let id = m["run_id"].as_str().unwrap();
    assert!(
        latest.to_string_lossy().ends_with(&id[..8]),
        "{latest:?} {id}"
    );
    // `report artifacts` and `plot artifacts` mean the newest run.
    let r = Run::exec(
        work,
        &["report", "artifacts"],
        crate::row_contract::ROW_IDENTITY,
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let v: Value = serde_json::from_str(&r.stdout()).unwrap();
    assert!(v.is_object());
    // Without `latest`, a directory of several runs is refused with the candidates listed.
    std::fs::remove_file(r.dir.path().join("artifacts/latest")).unwrap();
    let r = Run::exec(r.dir, &["plot", "artifacts"], &[]);
    assert_eq!(r.code(), 2);
    assert!(r.stderr().contains("holds several runs"), "{}", r.stderr());
    for n in &runs {
        assert!(r.stderr().contains(n.as_str()), "{}", r.stderr());
        assert!(!r.dir.path().join("artifacts").join(n).join("x").exists());
    }
    assert!(!r.dir.path().join("artifacts/metrics_plots.png").exists());
}

/// Reads one line of `args`' stdout, closes the pipe, and expects a quiet end.
fn closed_pipe(work: &Path, args: &[&str]) {
    let mut child = agentx_command(work, &[])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(!first.is_empty(), "{args:?} printed nothing");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
}

#[test]
fn no_command_panics_on_a_closed_pipe() {
    let work = tempfile::tempdir().unwrap();
    let corpus = fixture("traces-24.jsonl");
    let c = corpus.to_str().unwrap();
    closed_pipe(work.path(), &["dataset", "inspect", c]);
    closed_pipe(work.path(), &["dataset", "stats", c, "--json"]);
    closed_pipe(work.path(), &["run", "--dry-run", "--random-seed", "1"]);
    closed_pipe(
        work.path(),
        &[
            "run",
            "agentx-mvp",
            "--dry-run",
            "--json",
            "--random-seed",
            "1",
        ],
    );
    closed_pipe(work.path(), &["scenario", "list"]);
    closed_pipe(work.path(), &["--help"]);
}

#[test]
fn urls_are_read_as_users_write_them() {
    let sim = Sim::start(SimConfig::max());
    let work = tempfile::tempdir().unwrap();
    // The OpenAI base-URL habit: `/v1` is part of the base.
    let v1 = format!("{}/v1/", sim.url());
    let o = short_run(work.path(), &v1, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("read as the base URL"),
        "{}",
        stderr(&o)
    );
    let m: Value = serde_json::from_slice(
        &std::fs::read(work.path().join("artifacts/latest/run_summary.json")).unwrap(),
    )
    .unwrap();
    assert!(m["summary"]["requests_ok"].as_u64().unwrap() > 0, "{m}");
    let sent = sim.requests();

    // A full endpoint path, a port out of range: refused with the fix, before anything is sent.
    let full = format!("{}/v1/chat/completions", sim.url());
    let o = short_run(work.path(), &full, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(&format!("--url {} ", sim.url())),
        "{}",
        stderr(&o)
    );
    let o = short_run(work.path(), "http://127.0.0.1:99999", &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("the port 99999"), "{}", stderr(&o));
    // A path that leads nowhere: a 404 on the models route is an error at pre-flight.
    let o = short_run(work.path(), &format!("{}/nope", sim.url()), &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("HTTP 404"), "{}", stderr(&o));
    assert_eq!(sim.requests(), sent, "no chat request after the first run");
}

#[test]
fn a_concurrency_list_names_sweep() {
    let r = Run::exec(
        tempfile::tempdir().unwrap(),
        &["run", "--concurrency", "1,2", "--dry-run"],
        &[],
    );
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr().contains("agentx-host sweep --concurrency 1,2"),
        "{}",
        r.stderr()
    );
}

#[test]
fn replay_works_from_another_directory_and_names_what_it_reran() {
    let sim = Sim::start(SimConfig::max());
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir(work.path().join("data")).unwrap();
    std::fs::copy(
        fixture("traces-24.jsonl"),
        work.path().join("data/traces.jsonl"),
    )
    .unwrap();
    let o = agentx_command(work.path(), &[])
        .args([
            "run",
            "agentx-mvp",
            "--url",
            &sim.url(),
            "--model",
            "agentx-sim",
            "--dataset",
            "data/traces.jsonl",
            "--concurrency",
            "2",
            "--benchmark-duration",
            "1",
            "--ignore-trace-delays",
            "--unsafe-override",
            "--random-seed",
            "7",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let run = std::fs::canonicalize(work.path().join("artifacts/latest")).unwrap();
    let m: Value =
        serde_json::from_slice(&std::fs::read(run.join("run_manifest.json")).unwrap()).unwrap();
    // From elsewhere: the relative corpus path is found under the recorded working directory.
    let elsewhere = tempfile::tempdir().unwrap();
    let home = work.path().join("home");
    let replay = |extra: &[&str]| {
        agentx_command(elsewhere.path(), &[])
            .env("AGENTX_HOME", &home)
            .arg("replay")
            .arg(&run)
            .args(extra)
            .output()
            .unwrap()
    };
    let o = replay(&["--dry-run", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let p: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(p["lanes"], m["lanes"]);
    // The corpus gone: its cached copy, by the recorded digest.
    std::fs::remove_dir_all(work.path().join("data")).unwrap();
    let o = replay(&["--dry-run", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("cached copy"), "{}", stderr(&o));
    let p: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(p["lanes"], m["lanes"]);
    // A real rerun beside the run, whose manifest names the run it repeats.
    let o = replay(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut again = run.clone().into_os_string();
    again.push("-replay");
    let m2: Value = serde_json::from_slice(
        &std::fs::read(PathBuf::from(again).join("run_manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(m2["replay_of"]["run_id"], m["run_id"]);
    assert_eq!(m2["run_id"], m["run_id"]);
    // A second rerun into the same directory is refused without --overwrite.
    let o = replay(&[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--overwrite"), "{}", stderr(&o));
}

#[test]
fn a_simulator_run_replays_against_a_server_with_replay_model() {
    let sim = Sim::start(SimConfig::max());
    let work = tempfile::tempdir().unwrap();
    let o = agentx_command(work.path(), &[])
        .args([
            "run",
            "agentx-mvp",
            "--benchmark-duration",
            "1",
            "--concurrency",
            "2",
            "--ignore-trace-delays",
            "--random-seed",
            "3",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let replay = |extra: &[&str]| {
        agentx_command(work.path(), &[])
            .args(["replay", "artifacts", "--url", &sim.url()])
            .args(extra)
            .output()
            .unwrap()
    };
    let o = replay(&["--dry-run"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--model NAME"), "{}", stderr(&o));
    let o = replay(&["--model", "agentx-sim", "--output-artifact-dir", "again"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(sim.requests() > 0);
}

#[test]
fn scenario_list_shows_the_built_ins_on_a_fresh_home() {
    let r = Run::exec(tempfile::tempdir().unwrap(), &["scenario", "list"], &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let out = r.stdout();
    assert!(out.contains("built in:"), "{out}");
    assert!(out.contains("agentx-v1 (inferencex-agentx-v1)"), "{out}");
    assert!(out.contains("[default]"), "{out}");
    assert!(out.contains("agentx-mvp"), "{out}");
    assert!(out.contains("(empty;"), "{out}");
    let r = Run::exec(r.dir, &["scenario", "list", "--json"], &[]);
    let v: Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(v["builtin"][0]["default"], true);
    assert_eq!(v["store"].as_array().unwrap().len(), 0);
    let r = Run::exec(r.dir, &["scenario", "inspect", "nosuch"], &[]);
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr()
            .contains("agentx (default), agentx-v1, agentx-mvp, agentx-open"),
        "{}",
        r.stderr()
    );
}

#[test]
fn a_concurrency_beyond_the_open_file_limit_or_the_corpus_is_named_with_the_numbers() {
    let work = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_agentx-host");
    // A shell that lowers the limit (soft and hard) before it runs the binary.
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -n 200 && exec "$0" run agentx-mvp --concurrency 3000 --dry-run --random-seed 1"#)
        .arg(bin)
        .current_dir(work.path())
        .env("AGENTX_HOME", work.path().join("home"))
        .env("AGENTX_LOG", "info")
        .output()
        .unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(
        e.contains("--concurrency 3000 may need about 6256 open files")
            && e.contains("the open-file limit is 200"),
        "{e}"
    );
    assert!(
        e.contains("24 usable traces for 3000 lanes: each is replayed on about 125 lanes"),
        "{e}"
    );
}

/// Every flag and argument a user is offered says what it does: no empty help anywhere.
#[test]
fn every_offered_flag_has_help() {
    fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for a in cmd.get_arguments() {
            if a.is_hide_set() || a.get_id() == "help" || a.get_id() == "version" {
                continue;
            }
            let empty = a
                .get_help()
                .or(a.get_long_help())
                .is_none_or(|h| h.to_string().trim().is_empty());
            if empty {
                missing.push(format!("{path} --{}", a.get_id()));
            }
        }
        for sub in cmd.get_subcommands() {
            if sub.get_about().is_none() && sub.get_name() != "help" {
                missing.push(format!("{path} {} (no description)", sub.get_name()));
            }
            walk(sub, &format!("{path} {}", sub.get_name()), missing);
        }
    }
    let cmd = <agentx::cli::Cli as clap::CommandFactory>::command();
    let mut missing = Vec::new();
    walk(&cmd, "agentx-host", &mut missing);
    assert!(missing.is_empty(), "flags without help: {missing:#?}");
}

/// `agentx-host ARGS` in `dir` with the log filter left to `env` (no `AGENTX_LOG` of the harness).
fn logged(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = agentx_command(dir, env);
    c.env_remove("AGENTX_LOG").env_remove("RUST_LOG");
    c.envs(env.iter().copied());
    c.args(args).output().unwrap()
}

#[test]
fn info_is_what_an_operator_reads() {
    let work = tempfile::tempdir().unwrap();
    let corpus = fixture("traces-24.jsonl");
    let args = [
        "run",
        "--dataset",
        corpus.to_str().unwrap(),
        "--concurrency",
        "2",
        "--benchmark-duration",
        "1",
        "--sim-preset",
        "max",
        "--stats-interval",
        "0",
    ];
    let o = logged(work.path(), &args, &[]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    // The demo line names only what the flags left to it.
    assert!(
        e.contains(
            "no --url: a demo run with the built-in simulator (max), 30 s, --unsafe-override"
        ) || e
            .contains("no --url: a demo run with the built-in simulator (max), --unsafe-override"),
        "{e}"
    );
    assert!(
        !e.contains("bundled") && !e.contains("concurrency 4"),
        "{e}"
    );
    // No flag that does not exist, no advice to add what is implied, no raw timings, no lane table.
    assert!(!e.contains("--loader"), "{e}");
    assert!(!e.contains("add --unsafe-override"), "{e}");
    assert!(!e.contains("open_ms="), "{e}");
    assert!(e.contains("session-tree plan: 2 lanes"), "{e}");
    assert!(
        !e.contains("streams (next/warm"),
        "the lane table is DEBUG: {e}"
    );
    assert!(
        e.contains("replay_rc=0") && e.contains("Phase profiling complete"),
        "{e}"
    );

    // -v shows the table; -q and RUST_LOG=warn keep only warnings and errors.
    let mut dry: Vec<&str> = args.to_vec();
    dry.push("--dry-run");
    let o = logged(work.path(), &[&["-v"], &dry[..]].concat(), &[]);
    assert!(stderr(&o).contains("DEBUG"), "{}", stderr(&o));
    for (flags, env) in [(vec!["-q"], vec![]), (vec![], vec![("RUST_LOG", "warn")])] {
        let o = logged(work.path(), &[&flags[..], &args[..]].concat(), &env);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(
            !stderr(&o).contains(" INFO "),
            "{flags:?} {env:?}: {}",
            stderr(&o)
        );
    }
    // An error is the last word: no replay_rc after a refusal.
    let o = logged(work.path(), &["run", "--url", "ftp://x"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!stderr(&o).contains("replay_rc"), "{}", stderr(&o));
}

#[test]
fn one_vocabulary_across_subcommands_with_the_old_spellings_as_aliases() {
    use clap::Parser;
    let parse = |args: &[&str]| {
        agentx::cli::Cli::try_parse_from(std::iter::once("agentx-host").chain(args.iter().copied()))
            .map_err(|e| e.to_string())
    };
    for args in [
        &["run", "-o", "out", "-m", "x"][..],
        &["replay", "dir", "-o", "out", "-m", "x"],
        &["report", "dir", "-m", "x", "-o", "f.json"],
        &["sweep", "--concurrency", "1,2", "-o", "out", "-m", "x"],
        &[
            "dataset",
            "synth",
            "--random-seed",
            "3",
            "--synthesis-max-isl",
            "9",
            "-o",
            "x",
        ],
        &[
            "dataset",
            "synth",
            "--seed",
            "3",
            "--max-isl",
            "9",
            "-o",
            "x",
        ],
        &["dataset", "stats", "c.jsonl", "--home", "h"],
        &["sim", "--random-seed", "1", "--http-keepalive-timeout", "5"],
        &["sim", "--seed", "1", "--keep-alive-timeout", "5"],
        &["run", "--synthesis-max-isl", "9", "-q"],
        &["-v", "scenario", "list"],
    ] {
        parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    }
    // Flags a sweep does not act on are not offered in its help.
    let help = <agentx::cli::Cli as clap::CommandFactory>::command()
        .find_subcommand_mut("sweep")
        .unwrap()
        .render_long_help()
        .to_string();
    for f in [
        "--dry-run",
        "--json",
        "--shard ",
        "--merge-into",
        "--overwrite",
    ] {
        assert!(!help.contains(f), "sweep --help offers {f}");
    }
}

#[test]
fn the_scenario_is_also_a_flag_as_the_harness_writes_it() {
    let work = tempfile::tempdir().unwrap();
    let plan = |args: &[&str]| {
        let o = agentx_command(work.path(), &[])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        v["scenario"]["name"].as_str().unwrap().to_owned()
    };
    let flag = plan(&[
        "run",
        "--scenario",
        "inferencex-agentx-mvp",
        "--dry-run",
        "--json",
        "--random-seed",
        "1",
    ]);
    let positional = plan(&[
        "run",
        "agentx-mvp",
        "--dry-run",
        "--json",
        "--random-seed",
        "1",
    ]);
    assert_eq!(flag, "inferencex-agentx-mvp");
    assert_eq!(flag, positional);
    let o = agentx_command(work.path(), &[])
        .args(["run", "agentx-mvp", "--scenario", "agentx-v1", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
}
