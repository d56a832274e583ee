//! `--metrics-listen`: agentx's own Prometheus endpoint, scraped over HTTP while a demo run goes
//! and after its outputs are written (`--metrics-linger`), against the run's summary.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use crate::support::agentx_command;

/// The body of `GET http://{addr}{path}`, with the status code.
pub(crate) fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("the metrics endpoint accepts");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    (status, body.to_string())
}

/// The value of the sample `name` (with its labels, as the exposition writes them).
pub(crate) fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (sample_name, value) = line.rsplit_once(' ')?;
            (sample_name == name).then(|| value.parse().ok()).flatten()
        })
}

/// Starts `run` with `args` in `dir`, its stderr lines sent to the returned channel.
fn spawn_run(dir: &Path, args: &[&str]) -> (Child, mpsc::Receiver<String>) {
    let mut child = agentx_command(dir, &[])
        .arg("run")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (lines_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, lines)
}

/// Waits for the log line that names the endpoint; the address in it. Every line read goes to
/// `seen`.
fn endpoint_address(lines: &mpsc::Receiver<String>, seen: &mut Vec<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(240);
    while Instant::now() < deadline {
        let Ok(line) = lines.recv_timeout(Duration::from_secs(1)) else {
            continue;
        };
        let found = line
            .split("agentx metrics at http://")
            .nth(1)
            .and_then(|rest| rest.split("/metrics").next())
            .map(str::to_string);
        seen.push(line);
        if let Some(addr) = found {
            return addr;
        }
    }
    panic!("no endpoint line:\n{}", seen.join("\n"));
}

#[test]
fn the_endpoint_serves_the_documented_series_mid_run_and_the_summary_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let (mut child, lines) = spawn_run(
        dir.path(),
        &[
            "--benchmark-duration",
            "6",
            "--metrics-listen",
            "127.0.0.1:0",
            "--metrics-linger",
            "120",
            "-o",
            run_dir.to_str().unwrap(),
        ],
    );
    let mut seen = Vec::new();
    let addr = endpoint_address(&lines, &mut seen);
    // Mid-run: once a request went out, every documented family is there, with its stability.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mid_run = loop {
        let (status, body) = http_get(&addr, "/metrics");
        assert_eq!(status, 200, "{body}");
        let sent = sample(&body, r#"agentx_requests_sent_total{phase="warmup"}"#).unwrap_or(0.0);
        if sent > 0.0 || Instant::now() > deadline {
            break body;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        !run_dir.join("run_summary.json").exists(),
        "the first scrape came after the run"
    );
    for series in agentx::telemetry::prom::SERIES {
        assert!(
            mid_run.contains(&format!("# TYPE {} {}", series.name, series.kind)),
            "{} missing mid-run:\n{mid_run}",
            series.name
        );
    }
    assert_eq!(sample(&mid_run, "agentx_lanes"), Some(4.0), "{mid_run}");
    assert!(
        sample(&mid_run, "agentx_sessions_active").unwrap() > 0.0,
        "{mid_run}"
    );
    assert!(
        sample(&mid_run, "process_cpu_seconds_total").unwrap() > 0.0,
        "{mid_run}"
    );
    assert_eq!(http_get(&addr, "/other").0, 404);

    // The outputs are written and the endpoint lingers: its final values are the summary's.
    let summary_path = run_dir.join("run_summary.json");
    let deadline = Instant::now() + Duration::from_secs(300);
    while !summary_path.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let summary: Value = serde_json::from_slice(&std::fs::read(&summary_path).unwrap()).unwrap();
    let summary = &summary["summary"];
    let (_, last) = http_get(&addr, "/metrics");
    let profiling = |name: &str| sample(&last, &format!(r#"{name}{{phase="profiling"}}"#));
    let completed = |phase: &str, outcome: &str| {
        sample(
            &last,
            &format!(r#"agentx_requests_completed_total{{phase="{phase}",outcome="{outcome}"}}"#),
        )
        .unwrap()
    };
    let count = |key: &str| summary[key].as_f64().unwrap();
    assert!(count("requests_ok") > 0.0, "{summary}");
    assert_eq!(completed("profiling", "ok"), count("requests_ok"), "{last}");
    assert_eq!(completed("profiling", "failed"), count("requests_failed"));
    assert_eq!(completed("profiling", "cancelled"), count("cancelled"));
    assert_eq!(
        completed("profiling", "context_overflow"),
        count("context_overflows")
    );
    let warmup: f64 = ["ok", "failed", "cancelled", "context_overflow"]
        .iter()
        .map(|outcome| completed("warmup", outcome))
        .sum();
    assert_eq!(warmup, count("warmup_requests"));
    assert_eq!(
        profiling("agentx_input_tokens_total"),
        Some(count("input_tokens"))
    );
    assert_eq!(
        profiling("agentx_output_tokens_total"),
        Some(count("output_tokens"))
    );
    let lag = &summary["send_lag_ms"];
    assert_eq!(
        profiling("agentx_send_lag_seconds_count"),
        lag["count"].as_f64()
    );
    let lag_sum_s = lag["avg"].as_f64().unwrap() * lag["count"].as_f64().unwrap() / 1e3;
    let served_sum = profiling("agentx_send_lag_seconds_sum").unwrap();
    assert!(
        (served_sum - lag_sum_s).abs() < 1e-6,
        "{served_sum} against {lag_sum_s}"
    );
    let ttft = &summary["ttft_ms"];
    assert_eq!(
        profiling("agentx_time_to_first_token_seconds_count"),
        ttft["count"].as_f64()
    );
    // Every request sent came back, and nothing is left in flight or busy.
    let sent = profiling("agentx_requests_sent_total").unwrap();
    assert_eq!(
        sent,
        count("requests_ok")
            + count("requests_failed")
            + count("cancelled")
            + count("context_overflows")
    );
    assert_eq!(profiling("agentx_requests_in_flight"), Some(0.0));
    assert_eq!(sample(&last, "agentx_lanes_busy"), Some(0.0));
    assert_eq!(
        sample(&last, r#"agentx_stage{stage="done"}"#),
        Some(1.0),
        "{last}"
    );

    // An interrupt ends the linger; the run had completed, so it exits 0.
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    seen.extend(lines.try_iter());
    assert_eq!(status.code(), Some(0), "{}", seen.join("\n"));
}

#[test]
fn a_port_in_use_is_refused_before_anything_runs() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = agentx_command(dir.path(), &[])
        .args([
            "run",
            "--benchmark-duration",
            "5",
            "--metrics-listen",
            &addr,
            "-o",
            "run",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("--metrics-listen {addr}")) && stderr.contains("in use"),
        "{stderr}"
    );
    assert!(!stderr.contains("simulator started"), "{stderr}");
    assert!(!dir.path().join("run").exists(), "nothing is written");
}

#[test]
fn the_guide_lists_every_series_with_its_type_labels_and_stability() {
    let guide = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/guide/observability.md"),
    )
    .unwrap();
    let rows: Vec<Vec<String>> = guide
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            line.trim_matches('|')
                .split(" | ")
                .map(|cell| cell.trim().trim_matches('`').to_string())
                .collect()
        })
        .filter(|cells: &Vec<String>| cells.len() == 5)
        .collect();
    let listed: Vec<[String; 4]> = rows
        .iter()
        .map(|cells| {
            [
                cells[0].clone(),
                cells[1].clone(),
                cells[2].clone(),
                cells[3].clone(),
            ]
        })
        .collect();
    let served: Vec<[String; 4]> = agentx::telemetry::prom::SERIES
        .iter()
        .map(|series| {
            let labels = if series.labels.is_empty() {
                "-"
            } else {
                series.labels
            };
            let stability = match series.stability {
                agentx::telemetry::prom::Stability::Stable => "stable",
                agentx::telemetry::prom::Stability::Experimental => "experimental",
            };
            [
                series.name.to_string(),
                series.kind.to_string(),
                labels.to_string(),
                stability.to_string(),
            ]
        })
        .collect();
    assert_eq!(listed, served, "docs/guide/observability.md's series table");
}
