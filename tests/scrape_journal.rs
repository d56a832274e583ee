//! The server-metrics journal: a scrape log of engine pages journaled with flushes in between reads
//! back equal, with the same export; a torn last line is left out and a bad line elsewhere named;
//! a scraper over real HTTP journals exactly the log it hands over at its stop; and a run against
//! the built-in simulator leaves a journal that rebuilds its server-metrics export, as does one
//! killed mid-profiling (up to its last flush).

use std::path::Path;
use std::time::Duration;

use agentx::client::scrape::{EndpointLog, ScrapeConfig, ScrapeLog, Scraper};
use agentx::client::scrape_journal::{
    read_journal, JournalError, JournalFile, JournalWriter, SCRAPE_JOURNAL,
};
use agentx::export::server_metrics::{self, ExportMeta, CSV_FILE, JSON_FILE};
use agentx::fsio::Root;
use agentx::record::Clock;
use agentx::sim::{self, SimConfig};
use serde_json::Value;

use super::support::{fixture, Run};

/// The pages of a fixture file (separated by `# agentx-fixture: end page`).
fn pages(name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(fixture(&format!("metrics/{name}"))).unwrap();
    text.split("# agentx-fixture: end page\n")
        .map(str::to_owned)
        .collect()
}

/// vLLM's pages and then some: a failed fetch, the same page again, a page where the TTFT histogram
/// gained a bucket between two others, a series disappeared, a series returned, and an untyped
/// metric with non-finite values appeared.
fn vllm_scrapes() -> Vec<(u64, Option<String>)> {
    let p = pages("vllm.prom");
    let (first, second) = (p[0].clone(), p[1].clone());
    let gained = second
        .replace(
            "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.5\",model_name=\"m\"} 15.0\n",
            "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.25\",model_name=\"m\"} 12.0\n\
             vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.5\",model_name=\"m\"} 15.0\n",
        )
        .replace(
            "vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 0.0\n",
            "",
        )
        + "agentx_test_value{kind=\"up\"} +Inf\nagentx_test_value{kind=\"down\"} -Inf\n";
    assert_ne!(gained, second);
    let later = gained.replace(
        "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.25\",model_name=\"m\"} 12.0",
        "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.25\",model_name=\"m\"} 13.0",
    );
    let ms = 1_000_000u64;
    vec![
        (100 * ms, Some(first)),
        (433 * ms, None),
        (766 * ms, Some(second.clone())),
        (1100 * ms, Some(second.clone())),
        (1433 * ms, Some(gained)),
        (1766 * ms, Some(later)),
        (2100 * ms, Some(second)),
    ]
}

fn endpoint_log(url: &str, scrapes: &[(u64, Option<String>)]) -> EndpointLog {
    EndpointLog::from_pages(url, scrapes.iter().map(|(t, p)| (*t, p.as_deref()))).unwrap()
}

fn assert_same_log(a: &ScrapeLog, b: &ScrapeLog) {
    assert_eq!(a.clock.anchor_unix_ns(), b.clock.anchor_unix_ns());
    assert_eq!(a.interval, b.interval);
    assert_eq!(a.endpoints.len(), b.endpoints.len());
    for (x, y) in a.endpoints.iter().zip(&b.endpoints) {
        assert_eq!(x, y, "{}", x.url);
    }
}

/// Journals two endpoints with a flush after every scrape of the first, reads the file back.
#[test]
fn a_journaled_log_reads_back_equal_with_the_same_export() {
    let vllm = vllm_scrapes();
    let sglang: Vec<(u64, Option<String>)> = pages("sglang.prom")
        .into_iter()
        .enumerate()
        .map(|(i, p)| (200_000_000 + i as u64 * 900_000_000, Some(p)))
        .collect();
    let urls = [
        "http://a:8000/metrics".to_string(),
        "http://b:30000/metrics".to_string(),
    ];
    let dir = tempfile::tempdir().unwrap();
    let root = Root::open(dir.path()).unwrap();
    let clock = Clock::start();
    let interval = Duration::from_millis(333);
    let mut w = JournalWriter::new(JournalFile::create(&root).unwrap(), &clock, interval, &urls);
    // The logs grow a scrape at a time (a log of a prefix of the pages is a prefix of the log).
    for k in 1..=vllm.len() {
        let logs = [
            endpoint_log(&urls[0], &vllm[..k]),
            endpoint_log(&urls[1], &sglang[..k.min(sglang.len())]),
        ];
        w.flush(&logs).unwrap();
        if k == 3 {
            // A flush with nothing new writes nothing.
            let before = std::fs::metadata(dir.path().join(SCRAPE_JOURNAL))
                .unwrap()
                .len();
            w.flush(&logs).unwrap();
            let after = std::fs::metadata(dir.path().join(SCRAPE_JOURNAL))
                .unwrap()
                .len();
            assert_eq!(before, after);
        }
    }
    let log = ScrapeLog {
        clock,
        interval,
        endpoints: vec![
            endpoint_log(&urls[0], &vllm),
            endpoint_log(&urls[1], &sglang),
        ],
    };
    // What the log holds that the journal must carry.
    let e = &log.endpoints[0];
    let ttft = &e.families["vllm:time_to_first_token_seconds"];
    let (_, h) = ttft.series.iter().next().unwrap();
    let agentx::client::scrape::SeriesLog::Histogram(h) = h else {
        panic!("a histogram")
    };
    let les: Vec<&str> = h.buckets.iter().map(|b| b.le_text.as_str()).collect();
    assert_eq!(les, ["0.1", "0.25", "0.5", "+Inf"]);
    assert!(e.failures.connect == 1 && e.last_error.is_some());
    let waiting: Vec<_> = e.scalars("vllm:num_requests_waiting").collect();
    assert!(waiting[1].1.points().iter().any(|p| !p.present));
    assert!(e
        .scalars("agentx_test_value")
        .any(|(_, t)| t.first() == Some(f64::NEG_INFINITY)));

    let back = read_journal(&dir.path().join(SCRAPE_JOURNAL)).unwrap();
    assert_same_log(&back, &log);
    let window = (500_000_000, 2_000_000_000);
    let meta = ExportMeta::default();
    assert_eq!(
        server_metrics::to_json(&back, window, &meta),
        server_metrics::to_json(&log, window, &meta)
    );
    assert_eq!(
        server_metrics::to_csv(&back, window, &meta),
        server_metrics::to_csv(&log, window, &meta)
    );
}

/// A journal of the vLLM scrapes with a flush after each, and its lines.
fn journal_of_vllm(dir: &Path) -> (ScrapeLog, Vec<String>) {
    let scrapes = vllm_scrapes();
    let url = "http://a:8000/metrics".to_string();
    let clock = Clock::start();
    let root = Root::open(dir).unwrap();
    let file = JournalFile::create(&root).unwrap();
    let mut w = JournalWriter::new(
        file,
        &clock,
        Duration::from_millis(333),
        std::slice::from_ref(&url),
    );
    for k in 1..=scrapes.len() {
        w.flush(&[endpoint_log(&url, &scrapes[..k])]).unwrap();
    }
    let log = ScrapeLog {
        clock,
        interval: Duration::from_millis(333),
        endpoints: vec![endpoint_log(&url, &scrapes)],
    };
    let text = std::fs::read_to_string(dir.join(SCRAPE_JOURNAL)).unwrap();
    (log, text.lines().map(str::to_owned).collect())
}

#[test]
fn a_torn_last_line_is_left_out_and_a_bad_line_elsewhere_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(SCRAPE_JOURNAL);
    let (full, lines) = journal_of_vllm(dir.path());
    assert_eq!(lines.len(), 1 + vllm_scrapes().len());

    // Killed while writing the last line: the log as of the flush before.
    let last = lines.last().unwrap();
    let torn = format!(
        "{}\n{}",
        lines[..lines.len() - 1].join("\n"),
        &last[..last.len() / 2]
    );
    std::fs::write(&path, torn).unwrap();
    let back = read_journal(&path).unwrap();
    let scrapes = vllm_scrapes();
    let before = endpoint_log(&full.endpoints[0].url, &scrapes[..scrapes.len() - 1]);
    assert_eq!(back.endpoints, [before]);

    // Whole, the same file reads back to the full log.
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    assert_same_log(&read_journal(&path).unwrap(), &full);

    // A damaged line in the middle: its file and line, and what is wrong.
    let mut bad = lines.clone();
    bad[3] = bad[3][..bad[3].len() - 5].to_string();
    std::fs::write(&path, bad.join("\n") + "\n").unwrap();
    let e = read_journal(&path).unwrap_err();
    assert!(matches!(e, JournalError::Line { line: 4, .. }), "{e}");
    assert!(
        e.to_string()
            .starts_with(&format!("{}:4: EOF while parsing", path.display())),
        "{e}"
    );
    // A complete last line that is wrong is damage, not a kill.
    let mut bad = lines.clone();
    let n = bad.len();
    bad[n - 1] = bad[n - 1].replace("\"ep\":0", "\"ep\":7");
    std::fs::write(&path, bad.join("\n") + "\n").unwrap();
    let e = read_journal(&path).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "{}:{n}: endpoint 7 of a journal of 1 endpoints",
            path.display()
        )),
        "{e}"
    );
    // A change point past the scrapes the journal has.
    let mut bad = lines.clone();
    bad[1] = bad[1].replacen("[0,", "[99,", 1);
    std::fs::write(&path, bad.join("\n") + "\n").unwrap();
    let e = read_journal(&path).unwrap_err().to_string();
    assert!(
        e.contains(":2: series ") && e.contains("scrape 99 of 1 scrapes"),
        "{e}"
    );

    // Nothing but a torn header, another version, not a journal at all.
    std::fs::write(&path, &lines[0][..10]).unwrap();
    assert!(matches!(
        read_journal(&path),
        Err(JournalError::Empty { .. })
    ));
    std::fs::write(&path, "").unwrap();
    assert!(matches!(
        read_journal(&path),
        Err(JournalError::Empty { .. })
    ));
    std::fs::write(
        &path,
        lines[0].replace("\"version\":2", "\"version\":9") + "\n",
    )
    .unwrap();
    let e = read_journal(&path).unwrap_err().to_string();
    assert!(e.contains(":1: journal format version 9"), "{e}");
    std::fs::write(&path, "{\"records\":1}\n").unwrap();
    let e = read_journal(&path).unwrap_err().to_string();
    assert!(e.contains(":1: not a server-metrics journal header"), "{e}");
    let e = read_journal(&dir.path().join("absent.jsonl")).unwrap_err();
    assert!(matches!(e, JournalError::Read { .. }), "{e}");
}

/// A scraper of the simulator (real HTTP, two engines, traffic) and an endpoint that is down,
/// flushing every 40 ms: the journal reads back to the log `stop` hands over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scraper_journals_the_log_it_hands_over() {
    let mut c = SimConfig::max();
    c.engines = 2;
    let h = sim::spawn(c).unwrap();
    let down = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        format!("http://127.0.0.1:{}", l.local_addr().unwrap().port())
    };
    let dir = tempfile::tempdir().unwrap();
    let root = Root::open(dir.path()).unwrap();
    let mut cfg = ScrapeConfig::new(vec![h.url(), down]);
    cfg.interval = Duration::from_millis(15);
    cfg.journal = Some(JournalFile::create(&root).unwrap());
    cfg.journal_every = Duration::from_millis(40);
    let scraper = Scraper::start(cfg, Clock::start()).unwrap();
    for i in 0..8u64 {
        super::server_metrics::chat(h.addr(), 30, 2 + i).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let log = scraper.stop().await;
    h.shutdown().await;
    let text = std::fs::read_to_string(dir.path().join(SCRAPE_JOURNAL)).unwrap();
    assert!(text.lines().count() > 4, "{text}");
    let back = read_journal(&dir.path().join(SCRAPE_JOURNAL)).unwrap();
    assert!(log.endpoints[0].scrapes() > 5 && log.endpoints[1].failures.connect > 5);
    assert_same_log(&back, &log);
}

/// Where two JSON values first differ, and how.
fn first_difference(a: &Value, b: &Value, at: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) if x.len() == y.len() => x
            .iter()
            .find_map(|(k, v)| first_difference(v, y.get(k)?, &format!("{at}.{k}")))
            .or_else(|| x.keys().ne(y.keys()).then(|| format!("{at}: keys"))),
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (v, w))| first_difference(v, w, &format!("{at}[{i}]"))),
        _ => (a != b).then(|| format!("{at}: {a} != {b}")),
    }
}

/// A run against the built-in simulator: its journal rebuilds the server-metrics export it wrote.
#[test]
fn a_runs_journal_rebuilds_its_server_metrics_export() {
    let corpus = fixture("traces-24.jsonl");
    let r = Run::exec(
        tempfile::tempdir().unwrap(),
        &[
            "run",
            "--dataset",
            corpus.to_str().unwrap(),
            "--concurrency",
            "2",
            "--benchmark-duration",
            "3",
            "--sim-preset",
            "max",
            "--stats-interval",
            "0",
        ],
        &[],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let art = r.artifacts();
    let log = read_journal(&art.join(SCRAPE_JOURNAL)).unwrap();
    assert!(log.scrapes() > 5, "{}", log.scrapes());
    let wrote = r.json(JSON_FILE);
    // The profiling window the export was written for, from the manifest.
    let m = r.json("run_manifest.json");
    let at = |i: usize| m["profiling_ns"][i].as_u64().unwrap();
    let window = (at(0), at(1));
    let meta = ExportMeta {
        benchmark_id: wrote["benchmark_id"].as_str().map(str::to_owned),
        input_config: wrote["input_config"].clone(),
    };
    let rebuilt: Value = server_metrics::to_json(&log, window, &meta);
    if let Some(d) = first_difference(&rebuilt, &wrote, "") {
        panic!("the rebuilt export differs at {d}");
    }
    let csv = std::fs::read_to_string(art.join(CSV_FILE)).unwrap();
    assert_eq!(server_metrics::to_csv(&log, window, &meta), csv);
}

/// A run killed with SIGKILL mid-profiling: its journal reads back to the scrapes taken until the
/// last flush, which export like any other log.
#[test]
fn a_killed_runs_journal_keeps_its_scrapes() {
    let corpus = fixture("traces-24.jsonl");
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("out");
    let mut child = super::support::agentx_command(work.path(), &[])
        .args([
            "run",
            "--dataset",
            corpus.to_str().unwrap(),
            "--benchmark-duration",
            "120",
            "--stats-interval",
            "0",
            "-o",
            out.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let path = out.join(SCRAPE_JOURNAL);
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    // Flushes until the journal holds ten scrapes: the boundary scrape at profiling's start flushes
    // early too, so a count of lines says little about the scrapes they carry.
    let journaled_scrapes = |path: &std::path::Path| {
        read_journal(path).map_or(0, |log| {
            log.endpoints.first().map_or(0, EndpointLog::scrapes)
        })
    };
    while journaled_scrapes(&path) < 10 {
        assert!(std::time::Instant::now() < deadline, "no journal flushes");
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!out.join(JSON_FILE).exists());
    let log = read_journal(&path).unwrap();
    let e = &log.endpoints[0];
    assert!(e.scrapes() >= 10, "{}", e.scrapes());
    assert_eq!(e.failures.total(), 0);
    let window = (e.scrape_ns[0], *e.scrape_ns.last().unwrap());
    let j = server_metrics::to_json(&log, window, &ExportMeta::default());
    assert_eq!(j["summary"]["total_fetches"], e.fetches.len() as u64);
    assert!(j["metrics"]["vllm:prompt_tokens"]["series"][0]["stats"]["total"].is_number());
}

/// A `/metrics` endpoint that serves a one-gauge page until `hang` is set, then holds every
/// connection open without an answer (a server that stopped answering); its address.
fn endpoint_that_hangs(hang: std::sync::Arc<std::sync::atomic::AtomicBool>) -> String {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            if hang.load(std::sync::atomic::Ordering::SeqCst) {
                held.push(s);
                continue;
            }
            let body = "# TYPE agentx_probe gauge\nagentx_probe 1\n";
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{addr}")
}

/// The boundaries endpoint `ep` of a journal took (`profiling_start`, …), as its lines say.
fn journaled_boundaries(path: &Path, ep: u64) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|d| d["ep"] == ep)
        .flat_map(|d| d["boundaries"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["scrape"].is_u64())
        .map(|b| b["at"].as_str().unwrap().to_string())
        .collect()
}

/// A session-tree run killed after its profiling ended, then finalized: its journal carried the
/// boundary scrapes it took (each journaled as it is taken), so `finalize` uses the same window
/// edges and the profiling deltas equal the profiling records to the token. The run is held
/// between its last boundary scrape of the simulator and its exports by a second endpoint that
/// stops answering after profiling begins: its boundary scrapes time out, are retried once and
/// recorded as missing, while the simulator's are already in the journal.
#[test]
fn a_finalized_killed_runs_profiling_counters_equal_its_records() {
    use super::support::{boundaries_taken, record_counts, server_counts};
    use agentx::record::{read_records, Phase};
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut cfg = SimConfig::max();
    cfg.timing = agentx::sim::Timing::Fixed {
        ttft: Duration::from_millis(20),
        itl: Duration::from_millis(1),
    };
    let sim = super::support::Sim::start(cfg);
    let hang = std::sync::Arc::new(AtomicBool::new(false));
    let stuck = endpoint_that_hangs(hang.clone());
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("out");
    let mut child = super::support::agentx_command(work.path(), &[])
        .args(super::support::tree_run_args(
            &sim.url(),
            &["--server-metrics", &stuck, "-o", out.to_str().unwrap()],
        ))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let journal = out.join(SCRAPE_JOURNAL);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let wait_for = |child: &mut std::process::Child, b: &str| {
        while !journaled_boundaries(&journal, 0).iter().any(|x| x == b) {
            assert!(
                std::time::Instant::now() < deadline,
                "no {b} boundary journaled"
            );
            assert!(child.try_wait().unwrap().is_none(), "the run ended early");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for(&mut child, "profiling_start");
    hang.store(true, Ordering::SeqCst);
    wait_for(&mut child, "profiling_complete");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!out.join(JSON_FILE).exists(), "the run wrote its exports");

    let r = super::support::agentx_command(work.path(), &[])
        .args(["finalize", out.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    let export: Value =
        serde_json::from_slice(&std::fs::read(out.join(JSON_FILE)).unwrap()).unwrap();
    let url = format!("{}/metrics", sim.url());
    let taken = boundaries_taken(&export, &url);
    assert!(
        taken.contains(&"profiling_start".to_string())
            && taken.contains(&"profiling_complete".to_string()),
        "{taken:?}"
    );
    let records = read_records(&out.join("records.jsonl")).unwrap();
    let prof = record_counts(&records, Phase::Profiling);
    assert!(prof.iter().all(|&n| n > 0), "{prof:?}");
    assert_eq!(server_counts(&export["metrics"], &url), prof);
    // The endpoint that stopped answering: its profiling_end boundary scrape failed twice and is
    // recorded as missing, in the export and the summary.
    let stuck_url = format!("{stuck}/metrics");
    let missing = export["summary"]["boundary_scrapes"][&stuck_url]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["boundary"] == "profiling_end")
        .cloned()
        .unwrap_or_else(|| panic!("{}", export["summary"]["boundary_scrapes"]));
    assert_eq!(missing["attempts"], 2);
    assert!(
        missing["missing"]
            .as_str()
            .unwrap()
            .contains("no complete response within"),
        "{missing}"
    );
    let summary: Value =
        serde_json::from_slice(&std::fs::read(out.join("run_summary.json")).unwrap()).unwrap();
    let w = &summary["server_metrics_window"];
    assert_eq!(w["edges"], "not_all_boundary_scrapes", "{w}");
    assert!(
        w["missing_boundary_scrapes"].to_string().contains(&format!(
            "{stuck_url} profiling_end: no complete response within"
        )),
        "{w}"
    );
}
