//! `agentx-host sweep --server-cmd` with `agentx-host sim` as the server: a fresh server per point
//! (its own port and process), recorded in the point's manifest and row; a server that exits or
//! never becomes ready fails its point only; `--resume` starts no server for a finished point;
//! Ctrl-C stops the server's group; bad placeholders are refused, naming the flag.

use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::kill;
use nix::unistd::Pid;
use serde_json::Value;

use crate::support::{fixture_args, Run};

/// The simulator as a server command, on the picked port.
fn sim_cmd() -> String {
    format!(
        "exec '{}' sim --port {{port}} --preset max",
        env!("CARGO_BIN_EXE_agentx-host")
    )
}

/// The sweep's command line with `--server-cmd CMD` and without `--url`.
fn args(out: &Path, cmd: &str, extra: &[&str]) -> Vec<String> {
    let mut a = fixture_args("sweep", "-");
    let at = a.iter().position(|x| x == "--url").unwrap();
    a.drain(at..at + 2);
    a.extend(
        [
            "--benchmark-duration",
            "2",
            "--trace-idle-gap-cap-seconds",
            "0.01",
            "--output-artifact-dir",
            out.to_str().unwrap(),
            "--server-cmd",
            cmd,
        ]
        .map(String::from),
    );
    a.extend(extra.iter().map(std::string::ToString::to_string));
    a
}

fn sweep(out: &Path, cmd: &str, extra: &[&str]) -> Run {
    Run::exec(tempfile::tempdir().unwrap(), &args(out, cmd, extra), &[])
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Whether a process `pid` is alive (a zombie waiting for a parent that does not reap counts as
/// ended), within two seconds.
fn alive(pid: u64) -> bool {
    let t0 = Instant::now();
    loop {
        let gone = kill(Pid::from_raw(pid as i32), None).is_err()
            || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            });
        if gone {
            return false;
        }
        if t0.elapsed() > Duration::from_secs(2) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn every_point_gets_a_fresh_server_which_is_recorded_and_stopped() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("sweep");
    let r = sweep(&out, &sim_cmd(), &["--concurrency", "1,2"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let s = json(&out.join("sweep.json"));
    let mut pids = Vec::new();
    let mut ports = Vec::new();
    for (p, n) in s["points"].as_array().unwrap().iter().zip([1, 2]) {
        assert_eq!(p["status"], "completed", "{p}");
        let dir = out.join(format!("conc_{n}"));
        let m = json(&dir.join("run_manifest.json"));
        let srv = &m["server"];
        assert_eq!(srv, &p["server"], "the row and the manifest agree");
        let port = srv["port"].as_u64().unwrap();
        let url = format!("http://127.0.0.1:{port}");
        assert_eq!(srv["url"], url);
        assert_eq!(m["url"], url, "the point ran against its server");
        assert_eq!(
            srv["command"],
            sim_cmd().replace("{port}", &port.to_string())
        );
        assert!(srv["ready_s"].as_f64().unwrap() > 0.0);
        // The simulator ends cleanly on SIGTERM.
        assert_eq!(srv["exit"]["how"], "terminated", "{srv}");
        assert_eq!(srv["exit"]["code"], 0, "{srv}");
        assert_eq!(srv["log"], "server.log");
        let log = std::fs::read_to_string(dir.join("server.log")).unwrap();
        assert!(log.contains(&format!("at {url}")), "{log}");
        assert!(
            log.contains(&format!("as pid {} (the leader", srv["pid"])),
            "{log}"
        );
        // The point's command line reruns it against that URL, without the sweep's flags.
        let argv: Vec<&str> = m["argv"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert!(
            argv.windows(2).any(|w| w == ["--url", url.as_str()]),
            "{argv:?}"
        );
        assert!(!argv.iter().any(|a| a.starts_with("--server-")), "{argv:?}");
        let pid = srv["pid"].as_u64().unwrap();
        assert!(!alive(pid), "the server of concurrency {n} was stopped");
        assert!(
            r.stdout()
                .contains(&format!("server pid {pid} on port {port}, ready after"))
                && r.stdout().contains("s, terminated (exit code 0)"),
            "{}",
            r.stdout()
        );
        pids.push(pid);
        ports.push(port);
    }
    assert_ne!(pids[0], pids[1], "two servers");
    assert_ne!(ports[0], ports[1], "on two ports");

    // --resume keeps both points and starts no server (a longer wait for a server is the same
    // sweep).
    let r = sweep(
        &out,
        &sim_cmd(),
        &[
            "--concurrency",
            "1,2",
            "--resume",
            "--server-ready-timeout",
            "90",
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let again = json(&out.join("sweep.json"));
    for (p, old) in again["points"]
        .as_array()
        .unwrap()
        .iter()
        .zip(s["points"].as_array().unwrap())
    {
        assert_eq!(p["status"], "resumed");
        assert_eq!(p["server"], old["server"], "no server started again");
    }
    assert!(!r.stderr().contains("server started"), "{}", r.stderr());
}

#[test]
fn a_server_that_exits_or_never_gets_ready_fails_its_point_only() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("sweep");
    // Concurrency 1: a server that exits at once, saying why in words its command (also in the
    // log) does not hold; 2: the simulator; 3: the simulator, killed 2 s after its start (before
    // the point's 2 s of profiling could end, so before the stop).
    let cmd = format!(
        "if [ {{conc}} = 1 ]; then echo \"no GPU $((2+2))\" >&2; exit 3; fi; \
         if [ {{conc}} = 3 ]; then (sleep 2; kill -9 $$) & fi; {}",
        sim_cmd()
    );
    let r = sweep(&out, &cmd, &["--concurrency", "1,2,3"]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    let s = json(&out.join("sweep.json"));
    let (p1, p2) = (&s["points"][0], &s["points"][1]);
    assert_eq!(p1["status"], "failed");
    let e = p1["error"].as_str().unwrap();
    assert!(
        e.contains("the server exited before it was ready (exit code 3)") && e.contains("no GPU 4"),
        "{e}"
    );
    assert_eq!(p1["server"]["exit"]["how"], "exited");
    assert_eq!(p1["server"]["exit"]["code"], 3);
    assert!(p1["server"]["ready_s"].is_null());
    assert!(std::fs::read_to_string(out.join("conc_1/server.log"))
        .unwrap()
        .contains("no GPU 4"));
    assert!(!out.join("conc_1/run_manifest.json").exists());
    assert_eq!(p2["status"], "completed", "{p2}");
    let p3 = &s["points"][2];
    assert_eq!(p3["status"], "failed", "{p3}");
    assert_eq!(p3["server"]["exit"]["how"], "exited", "{p3}");
    assert_eq!(p3["server"]["exit"]["signal"], 9, "{p3}");
    assert!(
        p3["error"]
            .as_str()
            .unwrap()
            .starts_with("the server exited during the run (signal 9); see conc_3/server.log"),
        "{p3}"
    );
    assert!(r.stdout().contains(", exited (signal 9)"), "{}", r.stdout());
    assert!(
        r.stdout().contains("exited before it was ready"),
        "{}",
        r.stdout()
    );

    // A server that never answers: the point fails after --server-ready-timeout, its group is
    // killed (not waited for), and the sweep goes on.
    let out = work.path().join("never");
    let cmd = "echo \"loading $((3+3))\"; sleep 120; true";
    let r = sweep(
        &out,
        cmd,
        &[
            "--concurrency",
            "1",
            "--server-ready-timeout",
            "1",
            "--url",
            "http://127.0.0.1:9",
        ],
    );
    assert_eq!(r.code(), 1, "{}", r.stderr());
    assert!(r.took < Duration::from_secs(60), "{:?}", r.took);
    let p = &json(&out.join("sweep.json"))["points"][0];
    let e = p["error"].as_str().unwrap();
    assert!(
        e.contains("did not answer http://127.0.0.1:9/v1/models with 200 within --server-ready-timeout 1 s")
            && e.contains("loading 6"),
        "{e}"
    );
    assert_eq!(p["server"]["command"], cmd);
    assert_eq!(p["server"]["exit"]["how"], "terminated");
    assert!(!alive(p["server"]["pid"].as_u64().unwrap()));
}

#[test]
fn unknown_placeholders_and_a_port_nobody_listens_on_are_refused() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("sweep");
    let cases: [(&str, &[&str], &str); 4] = [
        (
            "serve --port {foo}",
            &[],
            "--server-cmd \"serve --port {foo}\": unknown placeholder {foo}",
        ),
        (
            "serve --port {port}",
            &["--url", "http://h:{conc}"],
            "--url \"http://h:{conc}\": unknown placeholder {conc}",
        ),
        ("serve", &[], "it has no {port}"),
        (
            "serve --port {port}",
            &["--server-ready-timeout", "0"],
            "--server-ready-timeout",
        ),
    ];
    for (cmd, extra, want) in cases {
        let mut x = vec!["--concurrency", "1"];
        x.extend(extra);
        let r = sweep(&out, cmd, &x);
        assert_eq!(r.code(), 2, "{cmd}: {}", r.stderr());
        assert!(r.stderr().contains(want), "{cmd}: {}", r.stderr());
    }
    // `{port}` in --url without a server to start.
    let mut a = args(
        &out,
        "-",
        &["--concurrency", "1", "--url", "http://127.0.0.1:{port}"],
    );
    let at = a.iter().position(|x| x == "--server-cmd").unwrap();
    a.drain(at..at + 2);
    let r = Run::exec(tempfile::tempdir().unwrap(), &a, &[]);
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr().contains("--url \"http://127.0.0.1:{port}\"")
            && r.stderr().contains("--server-cmd"),
        "{}",
        r.stderr()
    );
    assert!(!out.exists(), "nothing was written");
}

#[test]
fn an_interrupt_during_a_point_stops_its_server() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("sweep");
    // The shell prints its pid, then becomes the simulator (same pid).
    let cmd = format!("echo pid=$$; {}", sim_cmd());
    let mut a = args(&out, &cmd, &["--concurrency", "1,2"]);
    let at = a.iter().position(|x| x == "--benchmark-duration").unwrap();
    a[at + 1] = "60".into();
    let child = crate::support::agentx_command(work.path(), &[])
        .args(&a)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let records = out.join("conc_1/records.jsonl");
    let t0 = Instant::now();
    while std::fs::read_to_string(&records).map_or(0, |s| s.lines().count()) < 5 {
        assert!(t0.elapsed().as_secs() < 60, "no records streamed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(out.join("conc_1/server.log")).unwrap();
    let pid: u64 = log
        .lines()
        .find_map(|l| l.strip_prefix("pid="))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(pid));
    kill(
        Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!alive(pid), "the server was stopped");
    let s = json(&out.join("sweep.json"));
    let points = s["points"].as_array().unwrap();
    assert_eq!(points.len(), 1, "{s}");
    assert_eq!(points[0]["server"]["pid"], pid);
    assert_eq!(points[0]["server"]["exit"]["how"], "terminated");
    assert!(!out.join("conc_2").exists());
}
