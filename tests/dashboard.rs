//! `run --ui dashboard`: on a terminal (a pseudo-terminal that is the run's controlling terminal)
//! the live dashboard draws on the alternate screen, Ctrl-C typed on it drains the run as it does
//! without a dashboard, every output is written and the terminal is given back; without a terminal
//! the same flag writes no escape code at all.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use agentx_dashboard::testkit::PtyChild;
use agentx_dashboard::HEADER;

use crate::support::agentx_command;

/// Entering and leaving the alternate screen.
const ENTER_ALTERNATE: &str = "\u{1b}[?1049h";
const LEAVE_ALTERNATE: &str = "\u{1b}[?1049l";

/// Waits until the run being drawn by `child` wrote a profiling record to `records`.
fn wait_for_profiling(child: &mut PtyChild, records: &Path) {
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(records).unwrap_or_default();
        if text.contains(r#""phase":"profiling""#) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300) && !child.has_exited(),
            "no profiling record in {}:\n{}",
            records.display(),
            child.text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn ctrl_c_on_the_dashboard_drains_the_run_writes_every_output_and_restores_the_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let mut command = agentx_command(tmp.path(), &[]);
    command.args([
        "run",
        "--ui",
        "dashboard",
        // Long enough that Ctrl-C comes first on a loaded machine; the drain does not wait it out.
        "--benchmark-duration",
        "60",
        "-o",
        dir.to_str().unwrap(),
    ]);
    let mut child = PtyChild::spawn(&command, 24, 80).unwrap();
    // The dashboard is up (its first frame, on a cleared screen, has the bold header whole) and
    // the replay is in its profiling phase: Ctrl-C then reaches the run's own signal handling.
    assert!(
        child.wait_for(&[HEADER], Duration::from_secs(300)),
        "no dashboard:\n{}",
        child.text()
    );
    wait_for_profiling(&mut child, &dir.join("records.jsonl"));
    child.interrupt().unwrap();
    let status = child
        .wait(Duration::from_secs(120))
        .unwrap_or_else(|| panic!("the run did not end after Ctrl-C:\n{}", child.text()));
    let text = child.text();
    assert_eq!(status.exit_code(), 1, "{status:?}\n{text}");
    assert!(!text.contains("panicked"), "{text}");
    let entered = text.find(ENTER_ALTERNATE).expect("the alternate screen");
    let left = text.rfind(LEAVE_ALTERNATE).expect("the normal screen back");
    assert!(entered < left, "{text}");
    // The drain's warning, logged while the dashboard drew, is written out after it.
    let warned = text
        .rfind("interrupt: no new turns start")
        .unwrap_or_else(|| panic!("no drain warning:\n{text}"));
    assert!(left < warned, "{text}");
    crate::survive::assert_exports(&dir);
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("run_summary.json")).unwrap()).unwrap();
    assert_eq!(summary["stop"], "interrupted", "{summary}");
}

#[test]
fn without_a_terminal_the_dashboard_flag_writes_no_escape_code() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let out = agentx_command(tmp.path(), &[])
        .args([
            "run",
            "--ui",
            "dashboard",
            "--benchmark-duration",
            "3",
            "-o",
            dir.to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!out.stderr.contains(&0x1b), "{stderr:?}");
    assert!(!out.stdout.contains(&0x1b));
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(dir.join("run_summary.json").is_file(), "{stderr}");
}
