//! Sharded runs end to end: shard processes of one run against the built-in simulator, their
//! rendezvous, and `agentx-host merge`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};

use agentx::record::{read_records, Phase, RequestRecord};
use agentx::sim::SimConfig;
use serde_json::Value;

use crate::support::{agentx_command, fixture_args, Run, Sim};

/// A port nothing listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The run flags every shard of a test run shares.
fn shard_args(url: &str, out: &Path, conc: u32, extra: &[&str]) -> Vec<String> {
    let mut a = fixture_args("run", url);
    a.extend(
        [
            "--concurrency",
            &conc.to_string(),
            "--benchmark-duration",
            "3",
            "--trace-idle-gap-cap-seconds",
            "0.01",
            "--output-artifact-dir",
            out.to_str().unwrap(),
            "--rendezvous-timeout",
            "60",
        ]
        .map(String::from),
    );
    a.extend(extra.iter().map(std::string::ToString::to_string));
    a
}

fn spawn(dir: &Path, args: &[String], env: &[(&str, &str)]) -> Child {
    agentx_command(dir, env)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Starts the `n` shards of one run into `out` (flags from [`shard_args`] plus `extra`), all with
/// a coordinator on a free local port; `tweak` changes shard `i`'s arguments before it starts.
fn start_shards(
    work: &Path,
    url: &dyn Fn(u32) -> String,
    out: &Path,
    n: u32,
    conc: u32,
    extra: &[&str],
    tweak: &dyn Fn(u32, &mut Vec<String>),
) -> Vec<Child> {
    // `--coordinator HOST:PORT`, as users write it: the port is the rendezvous port of every shard
    // (shard 0 listens on it), with no --coordinator-port.
    let coordinator = format!("127.0.0.1:{}", free_port());
    (0..n)
        .map(|i| {
            let shard = format!("{i}/{n}");
            let mut args = shard_args(&url(i), out, conc, extra);
            args.extend(["--shard", &shard, "--coordinator", &coordinator].map(String::from));
            tweak(i, &mut args);
            spawn(work, &args, &[])
        })
        .collect()
}

/// Sets the value after `flag` in `args`.
fn set(args: &mut [String], flag: &str, value: &str) {
    let at = args.iter().position(|a| a == flag).unwrap();
    args[at + 1] = value.into();
}

fn wait_all(children: Vec<Child>) -> Vec<Output> {
    children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn lanes(v: &Value) -> Vec<(u64, String, u64, String)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["lane"].as_u64().unwrap(),
                l["trace_id"].as_str().unwrap().to_string(),
                l["start_turn"].as_u64().unwrap(),
                l["marker"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn three_shards_replay_the_unsharded_plan_and_merge_into_one_run() {
    let sim = Sim::start(SimConfig::max());
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("run");
    let merged = work.path().join("merged");
    let url = sim.url();
    let merge_into = merged.to_str().unwrap().to_string();
    let children = start_shards(work.path(), &|_| url.clone(), &out, 3, 6, &[], &|i, a| {
        if i == 0 {
            a.extend(["--merge-into".to_string(), merge_into.clone()]);
        }
    });
    let outs = wait_all(children);
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.status.code(), Some(0), "shard {i}: {}", stderr(o));
    }
    let m = json(&merged.join("run_manifest.json"));
    crate::support::assert_artifacts_match_schemas(&merged);
    assert_eq!(m["shards"].as_array().unwrap().len(), 3);
    assert_eq!(m["concurrency"], 6);
    merged_plan_is_the_unsharded_plan(&sim.url(), &m);

    let records = read_records(&merged.join("records.jsonl")).unwrap();
    every_lane_recorded_and_no_trace_on_two_lanes_at_once(&records);
    phases_are_global(&records, &m);
    // Only shard 0 scraped the server.
    assert!(out.join("shard-0/server_metrics_export.json").is_file());
    assert!(!out.join("shard-1/server_metrics_export.json").exists());
    merged_exports_count_every_profiling_record(&merged, &records);

    // `report` accepts the merged directory.
    let rep = Run::exec(
        tempfile::tempdir().unwrap(),
        &[
            "report".to_string(),
            merged.to_str().unwrap().to_string(),
            "-o".into(),
            work.path().join("report.json").to_str().unwrap().into(),
        ],
        crate::row_contract::ROW_IDENTITY,
    );
    assert_eq!(rep.code(), 0, "{}", rep.stderr());
    crate::row_contract::assert_row(&json(&work.path().join("report.json")));

    merging_by_hand_refuses_a_missing_or_foreign_shard(&out, work.path(), records.len());
}

/// The merge has the plan of the run in one process (`m`: the merged manifest): same lanes, start
/// turns and markers.
fn merged_plan_is_the_unsharded_plan(url: &str, m: &Value) {
    let run_id = m["run_id"].as_str().unwrap().to_string();
    let mut dry = fixture_args("run", url);
    dry.extend(
        [
            "--concurrency",
            "6",
            "--benchmark-duration",
            "3",
            "--run-id",
            &run_id,
            "--dry-run",
            "--json",
        ]
        .map(String::from),
    );
    let d = Run::exec(tempfile::tempdir().unwrap(), &dry, &[]);
    assert_eq!(d.code(), 0, "{}", d.stderr());
    let plan: Value = serde_json::from_str(&d.stdout()).unwrap();
    assert_eq!(lanes(&m["lanes"]), lanes(&plan["lanes"]));
}

/// Records from every lane, ids unique across shards; no trace on two lanes at overlapping times
/// (sessions by correlation id).
fn every_lane_recorded_and_no_trace_on_two_lanes_at_once(records: &[RequestRecord]) {
    let mut seen: Vec<u32> = records.iter().map(|r| r.lane).collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen, (0..6).collect::<Vec<_>>());
    let ids: std::collections::HashSet<&str> =
        records.iter().map(|r| r.request_id.as_str()).collect();
    assert_eq!(ids.len(), records.len(), "request ids are unique");

    let mut sessions: HashMap<&str, (u32, &str, u64, u64)> = HashMap::new();
    for r in records.iter().filter(|r| r.phase == Phase::Profiling) {
        let e = sessions.entry(r.correlation_id.as_str()).or_insert((
            r.lane,
            r.trace_id.as_str(),
            r.send_ns,
            r.end_ns,
        ));
        e.2 = e.2.min(r.send_ns);
        e.3 = e.3.max(r.end_ns);
    }
    let v: Vec<_> = sessions.values().collect();
    for a in &v {
        for b in &v {
            if a.1 == b.1 && a.0 != b.0 {
                assert!(
                    a.3 <= b.2 || b.3 <= a.2,
                    "trace {} ran on lanes {} and {} at once",
                    a.1,
                    a.0,
                    b.0
                );
            }
        }
    }
}

/// Phases are global: no profiling request before the last warmup response of any shard, and the
/// shards' profiling began together (`m`: the merged manifest).
fn phases_are_global(records: &[RequestRecord], m: &Value) {
    let last_warm = records
        .iter()
        .filter(|r| r.phase == Phase::Warmup)
        .map(|r| r.end_ns)
        .max()
        .unwrap();
    let first_prof = records
        .iter()
        .filter(|r| r.phase == Phase::Profiling)
        .map(|r| r.intended_ns)
        .min()
        .unwrap();
    assert!(
        first_prof + 5_000_000 >= last_warm,
        "profiling began {} ms before the last warmup response",
        (last_warm - first_prof) as f64 / 1e6
    );
    let starts: Vec<u64> = m["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["profiling_ns"][0].as_u64().unwrap() + s["shift_ns"].as_u64().unwrap())
        .collect();
    let spread = starts.iter().max().unwrap() - starts.iter().min().unwrap();
    assert!(
        spread < 500_000_000,
        "profiling starts {} ms apart",
        spread / 1_000_000
    );
}

/// The merged directory has every export, its aggregate counting every profiling record.
fn merged_exports_count_every_profiling_record(merged: &Path, records: &[RequestRecord]) {
    assert!(merged.join("server_metrics_export.json").is_file());
    for f in [
        "profile_export.jsonl",
        "profile_export_aiperf.json",
        "profile_export_aiperf.csv",
        "metrics_plots.png",
        "report.html",
        "run_summary.json",
    ] {
        assert!(merged.join(f).is_file(), "{f}");
    }
    let agg = json(&merged.join("profile_export_aiperf.json"));
    let profiling = records
        .iter()
        .filter(|r| r.phase == Phase::Profiling)
        .count();
    assert_eq!(
        agg["request_count"]["avg"].as_f64().unwrap() as usize,
        profiling,
        "{}",
        agg["request_count"]
    );
}

/// Merging the shards of `out` by hand gives the same records (`records` of them); a missing shard
/// and another run's shard are refused.
fn merging_by_hand_refuses_a_missing_or_foreign_shard(out: &Path, work: &Path, records: usize) {
    let shard = |i: u32| out.join(format!("shard-{i}"));
    let again = Run::exec(
        tempfile::tempdir().unwrap(),
        &merge_args(&[shard(0), shard(1), shard(2)], &work.join("m2")),
        &[],
    );
    assert_eq!(again.code(), 0, "{}", again.stderr());
    assert_eq!(
        read_records(&work.join("m2/records.jsonl")).unwrap().len(),
        records
    );
    let e = Run::exec(
        tempfile::tempdir().unwrap(),
        &merge_args(&[shard(0), shard(2)], &work.join("m3")),
        &[],
    );
    assert_eq!(e.code(), 2);
    assert!(
        e.stderr().contains("shards 1 are missing"),
        "{}",
        e.stderr()
    );
    let other = work.join("other");
    std::fs::create_dir(&other).unwrap();
    for f in ["run_manifest.json", "run_summary.json", "records.jsonl"] {
        std::fs::copy(shard(1).join(f), other.join(f)).unwrap();
    }
    let mut om = json(&other.join("run_manifest.json"));
    om["run_id"] = "another-run".into();
    std::fs::write(other.join("run_manifest.json"), om.to_string()).unwrap();
    let e = Run::exec(
        tempfile::tempdir().unwrap(),
        &merge_args(&[shard(0), other, shard(2)], &work.join("m4")),
        &[],
    );
    assert_eq!(e.code(), 2);
    assert!(
        e.stderr().contains("shards of different runs: run id"),
        "{}",
        e.stderr()
    );
    assert!(!work.join("m4/records.jsonl").exists());
}

fn merge_args(dirs: &[PathBuf], out: &Path) -> Vec<String> {
    let mut a = vec!["merge".to_string()];
    a.extend(dirs.iter().map(|d| d.to_str().unwrap().to_string()));
    a.extend(["-o".to_string(), out.to_str().unwrap().to_string()]);
    a
}

#[test]
fn shards_that_disagree_on_the_plan_are_refused_naming_what_differs() {
    let sim = Sim::start(SimConfig::max());
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("run");
    let url = sim.url();
    // Shard 1 was given another seed.
    let children = start_shards(work.path(), &|_| url.clone(), &out, 2, 4, &[], &|i, a| {
        if i == 1 {
            set(a, "--random-seed", "43");
        }
    });
    let outs = wait_all(children);
    for o in &outs {
        assert_eq!(o.status.code(), Some(2), "{}", stderr(o));
        assert!(
            stderr(o).contains("--random-seed 43 (shard 0 has 42)"),
            "{}",
            stderr(o)
        );
    }
    // Nothing was sent.
    assert_eq!(sim.requests(), 0);
}

#[test]
fn a_coordinator_that_never_answers_and_a_bad_shard_get_clear_errors() {
    let work = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let mut args = shard_args(
        "http://127.0.0.1:9",
        &work.path().join("run"),
        4,
        &[
            "--shard",
            "1/2",
            "--coordinator",
            &format!("127.0.0.1:{port}"),
            "--skip-preflight",
        ],
    );
    set(&mut args, "--rendezvous-timeout", "1");
    let r = Run::exec(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr().contains(&format!(
            "no coordinator answered at 127.0.0.1:{port} within --rendezvous-timeout 1 s"
        )),
        "{}",
        r.stderr()
    );
    set(&mut args, "--shard", "2/2");
    let r = Run::exec(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr()
            .contains("shard index 2 is out of range for 2 shards (indices are 0 to 1)"),
        "{}",
        r.stderr()
    );
    // Slurm's variables say the same.
    let r = Run::exec(
        tempfile::tempdir().unwrap(),
        &shard_args("http://127.0.0.1:9", &work.path().join("run"), 4, &[]),
        &[
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_STEP_ID", "0"),
        ],
    );
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr()
            .contains("SLURM_PROCID/SLURM_NTASKS: shard index 3 is out of range"),
        "{}",
        r.stderr()
    );
}

#[test]
fn the_threshold_counts_over_all_shards_and_stops_every_shard() {
    // Every request after the warmups fails: the threshold trips over both shards' records.
    let mut cfg = SimConfig::max();
    cfg.faults.stop_after = Some(4);
    let sim = Sim::start(cfg);
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("run");
    let url = sim.url();
    let children = start_shards(
        work.path(),
        &|_| url.clone(),
        &out,
        2,
        4,
        &["--failed-request-threshold", "0.5", "--skip-preflight"],
        // A long run that only the threshold ends.
        &|_, a| set(a, "--benchmark-duration", "120"),
    );
    let outs = wait_all(children);
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.status.code(), Some(1), "shard {i}: {}", stderr(o));
        let s = json(&out.join(format!("shard-{i}/run_summary.json")));
        assert_eq!(
            s["stop"], "failed_request_threshold_exceeded",
            "shard {i}: {s}"
        );
    }
}

/// Starts two shards of a long run and waits until shard 1 has a profiling record.
fn two_long_shards(sim: &Sim, work: &Path) -> (PathBuf, Vec<Child>) {
    let out = work.join("run");
    let url = sim.url();
    let children = start_shards(work, &|_| url.clone(), &out, 2, 4, &[], &|_, a| {
        set(a, "--benchmark-duration", "300");
    });
    let records = out.join("shard-1/records.jsonl");
    let t0 = std::time::Instant::now();
    while !std::fs::read_to_string(&records).is_ok_and(|t| t.contains("\"profiling\"")) {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "shard 1 never reached profiling"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    (out, children)
}

#[test]
fn an_interrupt_of_one_shard_stops_every_shard_and_each_keeps_its_records() {
    let sim = Sim::start(SimConfig::max());
    let work = tempfile::tempdir().unwrap();
    let (out, children) = two_long_shards(&sim, work.path());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(children[1].id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let outs = wait_all(children);
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.status.code(), Some(1), "shard {i}: {}", stderr(o));
        let s = json(&out.join(format!("shard-{i}/run_summary.json")));
        assert_eq!(s["stop"], "interrupted", "shard {i}: {s}");
        assert!(s["records"].as_u64().unwrap() > 0);
    }
    assert!(
        stderr(&outs[0]).contains("shard 1 was interrupted"),
        "{}",
        stderr(&outs[0])
    );
}

#[test]
fn a_shard_that_dies_stops_the_others_which_keep_their_records() {
    let sim = Sim::start(SimConfig::max());
    let work = tempfile::tempdir().unwrap();
    let (out, mut children) = two_long_shards(&sim, work.path());
    children[1].kill().unwrap();
    let outs = wait_all(children);
    assert_eq!(outs[0].status.code(), Some(1), "{}", stderr(&outs[0]));
    let s = json(&out.join("shard-0/run_summary.json"));
    assert_eq!(s["stop"], "interrupted", "{s}");
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("shard 1 lost its connection"),
        "{s}"
    );
    assert!(s["records"].as_u64().unwrap() > 0);
    // What shard 1 measured before it died is still there.
    assert!(!read_records(&out.join("shard-1/records.jsonl"))
        .unwrap()
        .is_empty());
}

#[test]
fn a_warmup_failure_on_one_shard_stops_every_shard_before_profiling() {
    let good = Sim::start(SimConfig::max());
    let mut bad_cfg = SimConfig::max();
    bad_cfg.faults.fail_rate = 1.0;
    let bad = Sim::start(bad_cfg);
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("run");
    let (good, bad) = (good.url(), bad.url());
    let children = start_shards(
        work.path(),
        &|i| if i == 1 { bad.clone() } else { good.clone() },
        &out,
        2,
        4,
        &["--skip-preflight"],
        &|_, _| {},
    );
    let outs = wait_all(children);
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.status.code(), Some(1), "shard {i}: {}", stderr(o));
        let s = json(&out.join(format!("shard-{i}/run_summary.json")));
        assert_eq!(s["stop"], "warmup_failed", "shard {i}: {s}");
        // Shard 0's warmup went well; it stopped because shard 1's did not.
        let recs = read_records(&out.join(format!("shard-{i}/records.jsonl"))).unwrap();
        assert!(recs.iter().all(|r| r.phase == Phase::Warmup));
    }
    let s0 = json(&out.join("shard-0/run_summary.json"));
    assert!(
        s0["message"]
            .as_str()
            .unwrap()
            .contains("shard 1 warmup failed"),
        "{s0}"
    );
}

/// What a stranger at the rendezvous does with its connection.
#[derive(Clone, Copy)]
enum Stranger {
    /// Sends bytes that are no rendezvous message, and stays.
    Garbage,
    /// Says a well-formed hello of shard 1 with a wrong secret, and stays.
    WrongToken,
    /// Connects and says nothing.
    Silent,
}

/// A 2-shard run with a secret (AGENTX_RENDEZVOUS_TOKEN) whose coordinator a stranger reaches
/// first: shard 0 starts, the stranger connects, then shard 1 starts. Returns both shards' outputs
/// and the merged run's directory.
fn a_run_with_a_stranger(
    work: &Path,
    stranger: Stranger,
    duration: &str,
) -> (Vec<Output>, PathBuf) {
    use std::io::Write;
    let sim = Sim::start(SimConfig::max());
    let out = work.join("run");
    let merged = work.join("merged");
    let coordinator = format!("127.0.0.1:{}", free_port());
    let env = [("AGENTX_RENDEZVOUS_TOKEN", "the-run's-secret")];
    let args = |i: u32| {
        let mut a = shard_args(&sim.url(), &out, 4, &[]);
        set(&mut a, "--benchmark-duration", duration);
        let shard = format!("{i}/2");
        a.extend(["--shard", &shard, "--coordinator", &coordinator].map(String::from));
        if i == 0 {
            a.extend(["--merge-into".to_string(), merged.to_str().unwrap().into()]);
        }
        a
    };
    let shard0 = spawn(work, &args(0), &env);
    let t0 = std::time::Instant::now();
    let mut conn = loop {
        match std::net::TcpStream::connect(&coordinator) {
            Ok(c) => break c,
            Err(_) if t0.elapsed() < std::time::Duration::from_secs(60) => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => panic!("shard 0 never listened at {coordinator}: {e}"),
        }
    };
    match stranger {
        Stranger::Garbage => conn
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\x00\xff{\"t\":\n")
            .unwrap(),
        Stranger::WrongToken => {
            let hello = serde_json::json!({
                "t": "hello",
                "hello": {
                    "index": 1, "count": 2, "run_id": null, "seed": 42, "seed_drawn": false,
                    "scenario_sha256": "x", "dataset_key": "x", "concurrency": 4,
                    "settings": {}, "failed_request_threshold": null, "host": "stranger",
                },
                "proof": "00".repeat(32),
            });
            conn.write_all(format!("{hello}\n").as_bytes()).unwrap();
        }
        Stranger::Silent => {}
    }
    let shard1 = spawn(work, &args(1), &env);
    let outs = wait_all(vec![shard0, shard1]);
    drop(conn);
    (outs, merged)
}

/// Each shard exited 0 and the merge holds both shards' records.
fn assert_complete(outs: &[Output], merged: &Path) {
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.status.code(), Some(0), "shard {i}: {}", stderr(o));
    }
    let m = json(&merged.join("run_manifest.json"));
    assert_eq!(m["shards"].as_array().unwrap().len(), 2, "{m}");
    let records = read_records(&merged.join("records.jsonl")).unwrap();
    let mut lanes: Vec<u32> = records.iter().map(|r| r.lane).collect();
    lanes.sort_unstable();
    lanes.dedup();
    assert_eq!(lanes, vec![0, 1, 2, 3]);
}

#[test]
fn a_stranger_that_sends_garbage_cannot_stop_or_join_the_rendezvous() {
    let work = tempfile::tempdir().unwrap();
    let (outs, merged) = a_run_with_a_stranger(work.path(), Stranger::Garbage, "3");
    assert_complete(&outs, &merged);
    let e = stderr(&outs[0]);
    assert!(
        e.contains("rendezvous: refused a connection")
            && e.contains("its first line is not a rendezvous message"),
        "{e}"
    );
}

#[test]
fn a_peer_with_a_wrong_token_is_refused_and_the_run_goes_on() {
    let work = tempfile::tempdir().unwrap();
    let (outs, merged) = a_run_with_a_stranger(work.path(), Stranger::WrongToken, "3");
    assert_complete(&outs, &merged);
    let e = stderr(&outs[0]);
    assert!(
        e.contains("rendezvous: refused a connection")
            && e.contains("claims to be shard 1, but its rendezvous secret is not this run's"),
        "{e}"
    );
    assert!(
        !e.contains("the-run's-secret"),
        "the secret is never logged"
    );
}

#[test]
fn a_peer_that_says_nothing_does_not_delay_the_rendezvous() {
    let work = tempfile::tempdir().unwrap();
    let (outs, merged) = a_run_with_a_stranger(work.path(), Stranger::Silent, "3");
    assert_complete(&outs, &merged);
    // Refused when every shard had joined (or after the hello timeout, 10 s, on a slow machine).
    let e = stderr(&outs[0]);
    assert!(
        e.contains("rendezvous: refused a connection: it said no hello"),
        "{e}"
    );
}

#[test]
fn a_shard_with_another_token_is_told_so() {
    let sim = Sim::start(SimConfig::max());
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("run");
    let coordinator = format!("127.0.0.1:{}", free_port());
    let args = |i: u32| {
        let mut a = shard_args(&sim.url(), &out, 4, &[]);
        set(&mut a, "--rendezvous-timeout", "5");
        let shard = format!("{i}/2");
        a.extend(["--shard", &shard, "--coordinator", &coordinator].map(String::from));
        a
    };
    let children = vec![
        spawn(work.path(), &args(0), &[("AGENTX_RENDEZVOUS_TOKEN", "a")]),
        spawn(work.path(), &args(1), &[("AGENTX_RENDEZVOUS_TOKEN", "b")]),
    ];
    let outs = wait_all(children);
    for o in &outs {
        assert_eq!(o.status.code(), Some(2), "{}", stderr(o));
    }
    assert!(
        stderr(&outs[1])
            .contains("shard 0 refused shard 1: its rendezvous secret is not this run's"),
        "{}",
        stderr(&outs[1])
    );
    // Shard 1 is named; shard 0's own member, whose join waits as long as the coordinator does,
    // may give up in the same instant and be named too ("shards 0, 1") on a loaded machine.
    let missing = stderr(&outs[0]);
    assert!(
        missing.contains("shards 1 did not join within --rendezvous-timeout 5 s")
            || missing.contains("shards 0, 1 did not join within --rendezvous-timeout 5 s"),
        "{missing}"
    );
    assert_eq!(sim.requests(), 0);
}

/// The flags of a session-tree run of the default scenario on the with-subagents fixture.
fn tree_args(url: &str, conc: u32) -> Vec<String> {
    let corpus = crate::support::fixture("traces-subagents-8.jsonl");
    [
        "run",
        "--url",
        url,
        "--model",
        "agentx-sim",
        "--input-file",
        corpus.to_str().unwrap(),
        "--random-seed",
        "42",
        "--unsafe-override",
        "--concurrency",
        &conc.to_string(),
        "--benchmark-duration",
        "3",
        "--benchmark-grace-period",
        "30",
        // A quiet tree's next turn comes at once: every lane sends within the short run.
        "--trace-idle-gap-cap-seconds",
        "0.01",
        "--stats-interval",
        "0",
    ]
    .map(String::from)
    .to_vec()
}

/// The simulator at full speed with a fixed 20 ms TTFT and 1 ms between tokens.
fn fixed_timing_sim() -> Sim {
    let mut cfg = SimConfig::max();
    cfg.timing = agentx::sim::Timing::Fixed {
        ttft: std::time::Duration::from_millis(20),
        itl: std::time::Duration::from_millis(1),
    };
    Sim::start(cfg)
}

/// Runs two shards of a session-tree run (4 lanes) against `sim` under `work`, shard 0 merging
/// them; both must exit 0. Returns the shards' artifact directory and the merged run's.
fn two_tree_shards(sim: &Sim, work: &Path) -> (PathBuf, PathBuf) {
    let out = work.join("run");
    let merged = work.join("merged");
    let coordinator = format!("127.0.0.1:{}", free_port());
    let children: Vec<Child> = (0..2)
        .map(|i| {
            let mut a = tree_args(&sim.url(), 4);
            let shard = format!("{i}/2");
            a.extend(
                [
                    "--shard",
                    &shard,
                    "--coordinator",
                    &coordinator,
                    "--output-artifact-dir",
                    out.to_str().unwrap(),
                    "--rendezvous-timeout",
                    "60",
                ]
                .map(String::from),
            );
            if i == 0 {
                a.extend(["--merge-into".to_string(), merged.to_str().unwrap().into()]);
            }
            spawn(work, &a, &[])
        })
        .collect();
    let outs = wait_all(children);
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.status.code(), Some(0), "shard {i}: {}", stderr(o));
    }
    (out, merged)
}

/// Two shards of a session-tree run of the default scenario merge into the unsharded plan: the
/// same lanes (trace, t*, marker, alive streams) as the dry run in one process, records with
/// their trees' depth, parent and root ids, every recycled tree on one shard only and each marker
/// pass minted once, the tree counts summed, and the exports and report of a run in one process.
#[test]
fn two_shards_of_a_session_tree_run_merge_into_the_unsharded_plan() {
    let sim = fixed_timing_sim();
    let work = tempfile::tempdir().unwrap();
    let (out, merged) = two_tree_shards(&sim, work.path());
    let m = json(&merged.join("run_manifest.json"));
    crate::support::assert_artifacts_match_schemas(&merged);
    crate::support::assert_artifacts_match_schemas(&out.join("shard-0"));
    assert_eq!(m["shards"].as_array().unwrap().len(), 2);
    assert!(m.get("shard_exports").is_none());

    // The merged plan is the unsharded dry run's, lane for lane.
    let run_id = m["run_id"].as_str().unwrap().to_string();
    let mut dry = tree_args(&sim.url(), 4);
    dry.extend(["--run-id", &run_id, "--dry-run", "--json"].map(String::from));
    let d = Run::exec(tempfile::tempdir().unwrap(), &dry, &[]);
    assert_eq!(d.code(), 0, "{}", d.stderr());
    let plan: Value = serde_json::from_str(&d.stdout()).unwrap();
    assert_eq!(m["lanes"], plan["lanes"]);
    for (i, s) in m["shards"].as_array().unwrap().iter().enumerate() {
        let want: Vec<u64> = (0..4).filter(|l| l % 2 == i as u64).collect();
        assert_eq!(s["lanes"], serde_json::json!(want), "shard {i}'s lanes");
    }

    let records = read_records(&merged.join("records.jsonl")).unwrap();
    assert!(records.iter().all(|r| r.tree.is_some()), "tree records");
    let ids: std::collections::HashSet<&str> =
        records.iter().map(|r| r.request_id.as_str()).collect();
    assert_eq!(ids.len(), records.len(), "request ids are unique");
    let prof: Vec<_> = records
        .iter()
        .filter(|r| r.phase == Phase::Profiling)
        .collect();
    let mut lanes: Vec<u32> = prof.iter().map(|r| r.lane).collect();
    lanes.sort_unstable();
    lanes.dedup();
    assert_eq!(lanes, [0, 1, 2, 3]);
    // Depth, parent and root: a root stream is its own root; a child names its root as parent.
    assert!(prof
        .iter()
        .any(|r| r.tree.as_ref().unwrap().agent_depth > 0));
    for r in &prof {
        let t = r.tree.as_ref().unwrap();
        if t.agent_depth == 0 {
            assert_eq!(t.root_correlation_id, r.correlation_id);
            assert_eq!(t.parent_correlation_id, None);
        } else {
            assert_eq!(
                t.parent_correlation_id.as_ref(),
                Some(&t.root_correlation_id)
            );
        }
    }

    each_pass_minted_once_and_no_tree_on_two_shards(&prof, &plan);

    // The tree counts are the shards' together.
    let shard_counts: Vec<Value> = (0..2)
        .map(|i| json(&out.join(format!("shard-{i}/run_manifest.json")))["trees"].clone())
        .collect();
    let started: u64 = shard_counts
        .iter()
        .map(|t| t["trees_started"].as_u64().unwrap())
        .sum();
    assert_eq!(m["trees"]["trees_started"].as_u64(), Some(started));
    assert!(m["trees"]["peak_in_flight"].as_u64().unwrap() >= 2);

    // Profiling began together on both shards.
    let starts: Vec<u64> = m["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["profiling_ns"][0].as_u64().unwrap() + s["shift_ns"].as_u64().unwrap())
        .collect();
    let spread = starts.iter().max().unwrap() - starts.iter().min().unwrap();
    assert!(spread < 500_000_000, "profiling starts {spread} ns apart");

    for f in [
        "profile_export.jsonl",
        "profile_export_aiperf.json",
        "profile_export_aiperf.csv",
        "report.html",
        "run_summary.json",
    ] {
        assert!(merged.join(f).is_file(), "{f}");
    }
    let export = std::fs::read_to_string(merged.join("profile_export.jsonl")).unwrap();
    assert!(
        export.contains("\"root_correlation_id\""),
        "tree fields exported"
    );
    let rep = Run::exec(
        tempfile::tempdir().unwrap(),
        &[
            "report".to_string(),
            merged.to_str().unwrap().to_string(),
            "-o".into(),
            work.path().join("report.json").to_str().unwrap().into(),
        ],
        crate::row_contract::ROW_IDENTITY,
    );
    assert_eq!(rep.code(), 0, "{}", rep.stderr());
}

/// Each marker pass of a trace was minted once, on one lane; a recycled tree runs on one shard
/// only, and no tree runs on two shards at overlapping times (`plan`: the unsharded dry run's).
fn each_pass_minted_once_and_no_tree_on_two_shards(prof: &[&RequestRecord], plan: &Value) {
    // Runtime trees by root: source trace, pass, lane, and when they ran.
    let mut roots: HashMap<&str, (&str, u32, u32, u64, u64)> = HashMap::new();
    for r in prof {
        let t = r.tree.as_ref().unwrap();
        let e = roots.entry(t.root_correlation_id.as_str()).or_insert((
            t.source_trace_id.as_str(),
            r.recycle_pass,
            r.lane,
            r.send_ns,
            r.end_ns,
        ));
        e.3 = e.3.min(r.send_ns);
        e.4 = e.4.max(r.end_ns);
    }
    // Each marker pass of a trace was minted once, on one lane.
    let mut passes: HashMap<(&str, u32), &str> = HashMap::new();
    for (root, v) in &roots {
        if let Some(other) = passes.insert((v.0, v.1), root) {
            panic!("{} pass {} minted twice ({other}, {root})", v.0, v.1);
        }
    }
    // A recycled tree (a pass past the planned ones) runs on one shard only; no tree runs on two
    // shards at overlapping times.
    let planned: HashMap<&str, u64> = plan["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["trace_id"].as_str().unwrap(), l["lane"].as_u64().unwrap()))
        .collect();
    let recycled: Vec<_> = roots
        .values()
        .filter(|v| v.1 > 0 || !planned.contains_key(v.0))
        .collect();
    assert!(!recycled.is_empty(), "the run recycled trees: {roots:?}");
    for a in &recycled {
        for b in &recycled {
            if a.0 == b.0 {
                assert_eq!(a.2 % 2, b.2 % 2, "tree {} recycled on two shards", a.0);
            }
        }
    }
    for a in roots.values() {
        for b in roots.values() {
            if a.0 == b.0 && a.2 % 2 != b.2 % 2 {
                assert!(
                    a.4 <= b.3 || b.4 <= a.3,
                    "tree {} on two shards at once",
                    a.0
                );
            }
        }
    }
}

/// An interrupt of one shard of a session-tree run stops the other (the tree scheduler hears the
/// rendezvous's stop), and each keeps what it measured.
#[test]
fn an_interrupt_of_one_shard_of_a_tree_run_stops_both() {
    let sim = Sim::start(SimConfig::max());
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("run");
    let coordinator = format!("127.0.0.1:{}", free_port());
    let children: Vec<Child> = (0..2)
        .map(|i| {
            let mut a = tree_args(&sim.url(), 4);
            set(&mut a, "--benchmark-duration", "300");
            let shard = format!("{i}/2");
            a.extend(
                [
                    "--shard",
                    &shard,
                    "--coordinator",
                    &coordinator,
                    "--output-artifact-dir",
                    out.to_str().unwrap(),
                    "--rendezvous-timeout",
                    "60",
                ]
                .map(String::from),
            );
            spawn(work.path(), &a, &[])
        })
        .collect();
    // Both shards have a profiling record before shard 1 is interrupted (a shard's first
    // profiling request may be due later than the other's).
    let profiling = |i: u32| {
        std::fs::read_to_string(out.join(format!("shard-{i}/records.jsonl")))
            .is_ok_and(|t| t.contains("\"profiling\""))
    };
    let t0 = std::time::Instant::now();
    while !(profiling(0) && profiling(1)) {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(120),
            "the shards never both reached profiling"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(children[1].id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let outs = wait_all(children);
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.status.code(), Some(1), "shard {i}: {}", stderr(o));
        let s = json(&out.join(format!("shard-{i}/run_summary.json")));
        assert_eq!(s["stop"], "interrupted", "shard {i}: {s}");
        let recs = read_records(&out.join(format!("shard-{i}/records.jsonl"))).unwrap();
        assert!(
            recs.iter().any(|r| r.phase == Phase::Profiling),
            "shard {i}"
        );
    }
    assert!(
        stderr(&outs[0]).contains("shard 1 was interrupted"),
        "{}",
        stderr(&outs[0])
    );
}

/// Two shards of a session-tree run: shard 0's scraper alone takes the boundary scrapes, at the
/// global phase edges (warmup's start before any shard is ready, profiling's start when every
/// shard's warmup drained and before any shard profiles, its completion when every shard drained),
/// so the merged run's profiling deltas equal both shards' profiling records to the token.
#[test]
fn two_shards_profiling_counters_equal_both_shards_records() {
    use crate::support::{boundaries_taken, csv_counts, record_counts, server_counts};
    let sim = fixed_timing_sim();
    let work = tempfile::tempdir().unwrap();
    let (out, merged) = two_tree_shards(&sim, work.path());
    assert!(!out.join("shard-1/server_metrics_export.json").exists());
    let export = json(&merged.join("server_metrics_export.json"));
    let url = format!("{}/metrics", sim.url());
    assert_eq!(
        boundaries_taken(&export, &url),
        [
            // The cache-pressure stage's start and the duration's end are shard 0's own.
            "warmup_start",
            "cache_pressure_start",
            "profiling_start",
            "profiling_end",
            "profiling_complete"
        ]
    );
    let records = read_records(&merged.join("records.jsonl")).unwrap();
    let shards: std::collections::HashSet<u32> = records
        .iter()
        .filter(|r| r.phase == Phase::Profiling)
        .map(|r| r.lane % 2)
        .collect();
    assert_eq!(shards.len(), 2, "both shards profiled");
    let prof = record_counts(&records, Phase::Profiling);
    assert!(prof.iter().all(|&n| n > 0), "{prof:?}");
    assert_eq!(server_counts(&export["metrics"], &url), prof);
    assert_eq!(
        server_counts(&export["warmup_metrics"], &url),
        record_counts(&records, Phase::Warmup)
    );
    let csv = std::fs::read_to_string(merged.join("server_metrics_export.csv")).unwrap();
    let endpoint = sim.url().trim_start_matches("http://").to_string();
    assert_eq!(csv_counts(&csv, &endpoint), prof);
}

/// Two free ports in a row: `(port, port + 1)` bound and released.
fn two_free_ports() -> u16 {
    loop {
        let first = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = first.local_addr().unwrap().port();
        if port < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
}

#[test]
fn each_shard_serves_its_metrics_on_its_own_port_and_labels_its_spans() {
    let sim = Sim::start(SimConfig::max());
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("run");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let collector = runtime.block_on(agentx::telemetry::testkit::Receiver::start());
    let port = two_free_ports();
    let listen = format!("127.0.0.1:{port}");
    let url = sim.url();
    let extra = [
        "--metrics-listen",
        &listen,
        "--metrics-linger",
        "300",
        "--otlp-endpoint",
        &collector.url,
    ];
    let children = start_shards(
        work.path(),
        &|_| url.clone(),
        &out,
        2,
        4,
        &extra,
        &|_, _| {},
    );
    for shard in 0..2u16 {
        let summary_path = out.join(format!("shard-{shard}/run_summary.json"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
        while !summary_path.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        // Lingering after its outputs: shard I on PORT+I, every sample labelled, the final
        // counts its own summary's.
        let addr = format!("127.0.0.1:{}", port + shard);
        let (status, text) = crate::live_metrics::http_get(&addr, "/metrics");
        assert_eq!(status, 200, "{text}");
        let label = format!(r#"shard="{shard}""#);
        for line in text.lines().filter(|line| !line.starts_with('#')) {
            assert!(line.contains(&label), "shard {shard}: {line}");
        }
        let summary = json(&summary_path);
        let ok = crate::live_metrics::sample(
            &text,
            &format!(
                r#"agentx_requests_completed_total{{{label},phase="profiling",outcome="ok"}}"#
            ),
        );
        assert_eq!(ok, summary["summary"]["requests_ok"].as_f64(), "{text}");
        assert_eq!(
            crate::live_metrics::sample(&text, &format!("agentx_lanes{{{label}}}")),
            Some(2.0)
        );
    }
    for child in &children {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
    }
    let outs = wait_all(children);
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.status.code(), Some(0), "shard {i}: {}", stderr(o));
    }
    // Every span names the shard that sent it: one per record and one per stream of that shard.
    let spans_by_shard =
        collector
            .span_shards()
            .into_iter()
            .fold(HashMap::new(), |mut counts, shard| {
                *counts.entry(shard).or_insert(0usize) += 1;
                counts
            });
    for shard in 0..2i64 {
        let records = read_records(&out.join(format!("shard-{shard}/records.jsonl"))).unwrap();
        let streams: std::collections::HashSet<&str> =
            records.iter().map(|r| r.correlation_id.as_str()).collect();
        assert_eq!(
            spans_by_shard.get(&Some(shard)).copied(),
            Some(records.len() + streams.len()),
            "{spans_by_shard:?}"
        );
    }
    assert_eq!(spans_by_shard.len(), 2, "{spans_by_shard:?}");
}
