//! Server metrics end to end: the scraper against the simulated server on port 0 (two engines, real
//! chat traffic), an endpoint that is down, one that answers 404 and one that serves garbage; then
//! the aiperf-schema export over a profiling window that excludes earlier traffic.

use std::net::SocketAddr;
use std::time::Duration;

use agentx::client::scrape::{ScrapeConfig, Scraper};
use agentx::export::server_metrics::{self, CSV_FILE, JSON_FILE};
use agentx::fsio::Root;
use agentx::metrics::scrape_log::ScrapeLog;
use agentx::record::Clock;
use agentx::sim::{self, SimConfig};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One streamed chat completion of `words` prompt words and `max_tokens` output tokens.
pub(crate) async fn chat(addr: SocketAddr, words: usize, max_tokens: u64) {
    let prompt: Vec<String> = (0..words).map(|i| format!("w{i}")).collect();
    let body = json!({
        "model": "agentx-sim",
        "messages": [{"role": "user", "content": prompt.join(" ")}],
        "max_tokens": max_tokens,
        "stream": true,
        "stream_options": {"include_usage": true},
        "ignore_eos": true,
    })
    .to_string();
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut tx, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::post("/v1/chat/completions")
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = tx.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(text.ends_with(b"data: [DONE]\n\n"));
}

/// A port with nothing listening on it.
async fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

/// A server that answers every request 200 with a body that is not Prometheus text.
async fn garbage_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let body = "metric{unterminated=\"1 2\n";
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    addr
}

async fn wait_for_scrapes(s: &Scraper, more_than: u64) -> u64 {
    for _ in 0..400 {
        let n = s.snapshot().scrapes;
        if n > more_than {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("no scrape within 2 s");
}

fn series<'a>(j: &'a Value, name: &str) -> &'a [Value] {
    j["metrics"][name]["series"]
        .as_array()
        .unwrap_or_else(|| panic!("no metric {name}"))
}

fn sum_stat(j: &Value, name: &str, stat: &str) -> f64 {
    series(j, name)
        .iter()
        .map(|s| s["stats"][stat].as_f64().unwrap())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrapes_the_simulator_and_exports_the_profiling_window() {
    let mut config = SimConfig::max();
    config.engines = 2;
    let server = sim::spawn(config).unwrap();
    let down = format!("http://127.0.0.1:{}", closed_port().await);
    let missing = format!("{}/nothing/metrics", server.url());
    let garbage = format!("http://{}", garbage_server().await);
    let clock = Clock::start();
    let mut cfg = ScrapeConfig::new(vec![
        server.url(),
        down.clone(),
        missing.clone(),
        garbage.clone(),
    ]);
    cfg.interval = Duration::from_millis(25);
    cfg.timeout = Duration::from_secs(2);
    let scraper = Scraper::start(cfg, clock).unwrap();

    // Warmup traffic, seen by a scrape before the profiling window opens: not in the export.
    for _ in 0..3 {
        chat(server.addr(), 50, 4).await;
    }
    let n = wait_for_scrapes(&scraper, 0).await;
    wait_for_scrapes(&scraper, n).await;
    let start_ns = clock.now_ns();

    // Profiling traffic, spread over a few scrapes, round-robin over the two engines.
    let (mut prompt, mut generated) = (0u64, 0u64);
    for i in 0..10u64 {
        let (w, m) = (20 + i as usize, 3 + i);
        chat(server.addr(), w, m).await;
        prompt += w as u64;
        generated += m;
        if i % 3 == 0 {
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }
    let live = scraper.snapshot();
    assert!(live.scrapes >= 2, "{live:?}");
    assert!(live.failed_scrapes >= 2, "{live:?}");
    assert!(
        live.running.is_some() && live.kv_usage.is_some(),
        "{live:?}"
    );
    assert_eq!(
        live.prefix_cache_hit_rate.map(|r| (0.0..=1.0).contains(&r)),
        Some(true)
    );
    let end_ns = clock.now_ns();

    let log = scraper.stop().await;
    scrape_log_names_each_endpoints_failures(&log, end_ns);

    let dir = tempfile::tempdir().unwrap();
    let files =
        server_metrics::write(&Root::open(dir.path()).unwrap(), &log, (start_ns, end_ns)).unwrap();
    assert_eq!(
        files,
        [dir.path().join(JSON_FILE), dir.path().join(CSV_FILE)]
    );
    let j: Value = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();

    export_counts_the_profiling_traffic(&j, prompt, generated);

    let sim_url = format!("{}/metrics", server.url());
    assert_eq!(
        j["summary"]["endpoints_configured"],
        json!([
            sim_url,
            format!("{down}/metrics"),
            missing,
            format!("{garbage}/metrics")
        ])
    );
    assert_eq!(j["summary"]["endpoints_successful"], json!([sim_url]));
    let info = &j["summary"]["endpoint_info"];
    assert_eq!(info[&sim_url]["failed_fetches"], json!(0));
    assert!(
        info[&format!("{down}/metrics")]["failed_fetches"]
            .as_u64()
            .unwrap()
            >= 2
    );
    assert!(
        info[&format!("{down}/metrics")]["failures"]["connect"]
            .as_u64()
            .unwrap()
            >= 2
    );
    assert!(info[&sim_url]["unique_updates"].as_u64().unwrap() >= 2);

    let csv = std::fs::read_to_string(&files[1]).unwrap();
    let port = server.addr().port();
    assert!(
        csv.contains(&format!(
            "127.0.0.1:{port},counter,vllm:prompt_tokens,tokens,"
        )),
        "{csv}"
    );
    server.shutdown().await;
}

/// The scrape log of the four endpoints: the simulator scraped without a failure (the last scrape
/// at stop, after the window ending at `end_ns`), the others each failing in its own way.
fn scrape_log_names_each_endpoints_failures(log: &ScrapeLog, end_ns: u64) {
    assert_eq!(log.endpoints.len(), 4);
    let sim_log = &log.endpoints[0];
    assert!(sim_log.scrapes() >= 3, "{}", sim_log.scrapes());
    assert_eq!(sim_log.failures.total(), 0, "{:?}", sim_log.last_error);
    // The final scrape was taken at stop, after the window.
    assert!(*sim_log.scrape_ns.last().unwrap() >= end_ns);
    let down_log = &log.endpoints[1];
    assert_eq!(down_log.scrapes(), 0);
    assert!(down_log.failures.connect >= 2, "{:?}", down_log.failures);
    assert!(log.endpoints[2].failures.status >= 2);
    assert!(log.endpoints[2]
        .last_error
        .as_deref()
        .unwrap()
        .contains("404"));
    assert!(log.endpoints[3].failures.parse >= 2);
    assert!(log.endpoints[3]
        .last_error
        .as_deref()
        .unwrap()
        .contains("line 1"));
    assert_eq!(log.snapshot().running, Some(0.0));
}

/// The export's counter increases are exactly what the profiling traffic (`prompt` words,
/// `generated` tokens, 10 requests) caused, summed over engines; each engine its own series; each
/// metric its type and statistics.
fn export_counts_the_profiling_traffic(j: &Value, prompt: u64, generated: u64) {
    assert_eq!(sum_stat(j, "vllm:prompt_tokens", "total"), prompt as f64);
    assert_eq!(
        sum_stat(j, "vllm:generation_tokens", "total"),
        generated as f64
    );
    assert_eq!(sum_stat(j, "vllm:request_success", "total"), 10.0);
    assert_eq!(
        sum_stat(j, "vllm:e2e_request_latency_seconds", "count"),
        10.0
    );
    // The simulator observes one inter-token latency per generated token (as its own test shows).
    assert_eq!(
        sum_stat(j, "vllm:inter_token_latency_seconds", "count"),
        generated as f64
    );
    let p = series(j, "vllm:prompt_tokens");
    assert_eq!(p.len(), 2, "one series per engine");
    let engines: Vec<&str> = p
        .iter()
        .map(|s| s["labels"]["engine"].as_str().unwrap())
        .collect();
    assert_eq!(engines, ["0", "1"]);
    assert!(p[0]["stats"]["total"].as_f64().unwrap() > 0.0);
    assert_eq!(j["metrics"]["vllm:prompt_tokens"]["type"], "counter");
    assert_eq!(j["metrics"]["vllm:num_requests_running"]["type"], "gauge");
    assert_eq!(
        j["metrics"]["vllm:time_to_first_token_seconds"]["type"],
        "histogram"
    );
    let kv = &series(j, "vllm:kv_cache_usage_perc")[0]["stats"];
    for k in ["avg", "min", "max", "std", "p1", "p50", "p99"] {
        assert!(kv[k].is_number(), "{k}: {kv}");
    }
    let e2e = &series(j, "vllm:e2e_request_latency_seconds")[0];
    assert!(e2e["stats"]["p99_estimate"].is_number(), "{e2e}");
    assert!(e2e["buckets"]["+Inf"].as_f64().unwrap() > 0.0);
}

#[tokio::test]
async fn a_scraper_of_nothing_but_dead_endpoints_never_fails() {
    let down = format!("http://127.0.0.1:{}", closed_port().await);
    let clock = Clock::start();
    let mut cfg = ScrapeConfig::new(vec![down]);
    cfg.interval = Duration::from_millis(10);
    let s = Scraper::start(cfg, clock).unwrap();
    tokio::time::sleep(Duration::from_millis(60)).await;
    let log = s.stop().await;
    assert!(log.failed_scrapes() >= 2);
    assert_eq!(log.scrapes(), 0);
    let dir = tempfile::tempdir().unwrap();
    server_metrics::write(&Root::open(dir.path()).unwrap(), &log, (0, clock.now_ns())).unwrap();
    let j: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join(JSON_FILE)).unwrap()).unwrap();
    assert_eq!(j["metrics"], json!({}));
    assert_eq!(j["summary"]["endpoints_successful"], json!([]));

    let e = Scraper::start(ScrapeConfig::new(vec!["localhost:8000".into()]), clock).unwrap_err();
    assert!(e.to_string().contains("no scheme"), "{e}");
}

/// The realtime block's `srv` row carries the server's token throughput from its first row on,
/// against the built-in simulator (which exports vLLM's token counters).
#[test]
fn the_first_srv_row_has_the_servers_token_throughput() {
    let r = crate::support::Run::exec(
        tempfile::tempdir().unwrap(),
        &[
            "run",
            "agentx-mvp",
            "--benchmark-duration",
            "3",
            "--stats-interval",
            "1",
            "--sim-preset",
            "max",
            "--ignore-trace-delays",
        ],
        &[],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let err = r.stderr();
    let first = err
        .lines()
        .find(|l| l.contains(" srv "))
        .unwrap_or_else(|| panic!("no srv row in {err}"));
    assert!(
        !first.contains("tput_in_srv=-") && !first.contains("tput_out_srv=-"),
        "{first}"
    );
}

/// With progress rows more often than scrapes, a row with no scrape since the one before keeps the
/// server's last token throughput instead of `-`; against the simulator on a port of its own.
#[test]
fn srv_rows_between_scrapes_keep_the_servers_token_throughput() {
    let sim = crate::support::Sim::start(agentx::sim::SimConfig::max());
    let mut args = crate::support::fixture_args("run", &sim.url());
    let at = args.iter().position(|a| a == "--stats-interval").unwrap();
    args[at + 1] = "0.25".into();
    args.extend(
        [
            "--concurrency",
            "4",
            "--benchmark-duration",
            "4",
            "--ignore-trace-delays",
        ]
        .map(String::from),
    );
    let r = crate::support::Run::exec(
        tempfile::tempdir().unwrap(),
        &args,
        &[("AGENTX_SERVER_METRICS_COLLECTION_INTERVAL", "1")],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let err = r.stderr();
    let rows: Vec<&str> = err.lines().filter(|l| l.contains(" srv ")).collect();
    assert!(rows.len() >= 8, "{err}");
    // The first rows may come before a second scrape; after the first throughput, every row has one.
    let first = rows
        .iter()
        .position(|l| !l.contains("tput_in_srv=-"))
        .unwrap_or_else(|| panic!("no srv row with the server's throughput in {err}"));
    for l in &rows[first..] {
        assert!(
            !l.contains("tput_in_srv=-") && !l.contains("tput_out_srv=-"),
            "{l}"
        );
    }
}

/// The flags of a session-tree run of the default scenario on the with-subagents fixture against
/// `url` ([`crate::support::tree_run_args`]): warmup primers, then a cache-pressure stage of 2
/// requests per lane, 3 s of profiling and a grace period every request finishes within.
fn tree_run(url: &str) -> Vec<String> {
    crate::support::tree_run_args(url, &["--warmup-requests-per-lane", "2"])
}

/// A simulator whose requests take time (20 ms to the first token, 1 ms a token), so warmup and
/// profiling requests are in flight around the phase edges.
fn timed_sim() -> crate::support::Sim {
    let mut cfg = SimConfig::max();
    cfg.timing = agentx::sim::Timing::Fixed {
        ttft: Duration::from_millis(20),
        itl: Duration::from_millis(1),
    };
    crate::support::Sim::start(cfg)
}

/// A session-tree run with warmup primers and a cache-pressure stage, scraping once an hour: the
/// profiling deltas of `server_metrics_export.json` equal the profiling records' prompt, generation
/// and cached tokens and their count, to the token, and the warmup's equal the warmup records'.
/// Only the boundary scrapes fall between the first periodic scrape and the final one, so they
/// alone make it exact.
#[test]
fn the_profiling_counters_equal_the_profiling_records_to_the_token() {
    use crate::support::{boundaries_taken, record_counts, server_counts};
    use agentx::record::Phase;
    let sim = timed_sim();
    let r = crate::support::Run::in_process(
        tempfile::tempdir().unwrap(),
        &tree_run(&sim.url()),
        &[("AGENTX_SERVER_METRICS_COLLECTION_INTERVAL", "3600")],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let export = r.json(JSON_FILE);
    let url = format!("{}/metrics", sim.url());
    assert_eq!(
        boundaries_taken(&export, &url),
        [
            "warmup_start",
            "cache_pressure_start",
            "profiling_start",
            "profiling_end",
            "profiling_complete"
        ]
    );
    // The first periodic scrape, the five boundary scrapes and the final one: nothing else.
    assert_eq!(
        export["summary"]["endpoint_info"][&url]["total_fetches"],
        json!(7)
    );
    assert_eq!(
        export["summary"]["profiling_window"],
        json!({"edges": "boundary_scrapes", "notes": []})
    );
    let records = r.records();
    let prof = record_counts(&records, Phase::Profiling);
    assert!(prof.iter().all(|&n| n > 0), "{prof:?}");
    assert_eq!(server_counts(&export["metrics"], &url), prof);
    let warm = record_counts(&records, Phase::Warmup);
    assert_eq!(server_counts(&export["warmup_metrics"], &url), warm);
    // The CSV carries the same totals and says where its edges come from.
    let csv = std::fs::read_to_string(r.artifacts().join(CSV_FILE)).unwrap();
    assert!(csv.contains(
        "# profiling window edges: the profiling_start and profiling_complete boundary scrapes\n"
    ));
    assert!(csv.contains(" profiling_start (profiling): 20"), "{csv}");
    let endpoint = sim.url().trim_start_matches("http://").to_string();
    assert_eq!(crate::support::csv_counts(&csv, &endpoint), prof);
    let summary = r.summary();
    assert_eq!(
        summary["server_metrics_window"],
        json!({"edges": "boundary_scrapes"})
    );
}

/// A clock `tick_ns` coarse, shifted so that `edge` ends a tick: every time a log carries, put on
/// the tick it falls in.
fn coarse(t: u64, tick_ns: u64, edge: u64) -> u64 {
    let shift = tick_ns - 1 - edge % tick_ns;
    (t + shift) / tick_ns * tick_ns
}

/// A run whose warmup ends on the same tick of the clock as profiling begins: the run's scrape log
/// (its journal) with every time put on a clock coarse enough that the last warmup response, the
/// profiling_start boundary scrape and profiling's start share one tick (the tick ends at
/// profiling's start and is longer than the time between the warmup's end and it, a millisecond
/// on an idle machine). Times cannot tell warmup from profiling there; the boundary scrapes' indices
/// do, so the export of the coarse log still equals the profiling records to the token, as the
/// run's own export does.
#[test]
fn a_warmup_that_ends_on_the_tick_profiling_begins_is_still_exact() {
    use crate::support::{record_counts, server_counts};
    use agentx::client::scrape_journal::{read_journal, SCRAPE_JOURNAL};
    use agentx::record::Phase;
    let sim = timed_sim();
    let r =
        crate::support::Run::in_process(tempfile::tempdir().unwrap(), &tree_run(&sim.url()), &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let url = format!("{}/metrics", sim.url());
    let records = r.records();
    let prof = record_counts(&records, Phase::Profiling);
    assert_eq!(server_counts(&r.json(JSON_FILE)["metrics"], &url), prof);

    let manifest = r.json("run_manifest.json");
    let window = manifest["profiling_ns"].as_array().unwrap();
    let (p0, p1) = (window[0].as_u64().unwrap(), window[1].as_u64().unwrap());
    let warm_end = records
        .iter()
        .filter(|r| r.phase == Phase::Warmup)
        .map(|r| r.end_ns)
        .max()
        .unwrap();
    assert!(warm_end <= p0);
    let tick = ((p0 - warm_end) / 1_000_000 + 1) * 1_000_000;
    let mut log = read_journal(&r.artifacts().join(SCRAPE_JOURNAL)).unwrap();
    let e = &mut log.endpoints[0];
    for t in &mut e.scrape_ns {
        *t = coarse(*t, tick, p0);
    }
    for f in &mut e.fetches {
        f.start_ns = coarse(f.start_ns, tick, p0);
    }
    let start = e
        .boundary(agentx::client::scrape::Boundary::ProfilingStart)
        .map(|b| *b.taken.as_ref().unwrap())
        .unwrap();
    let on_tick = coarse(p0, tick, p0);
    assert_eq!(coarse(warm_end, tick, p0), on_tick);
    assert_eq!(e.scrape_ns[start as usize], on_tick);
    let coarse_window = (on_tick, coarse(p1, tick, p0));
    let j = server_metrics::to_json(&log, coarse_window, &server_metrics::ExportMeta::default());
    assert_eq!(
        j["summary"]["profiling_window"]["edges"],
        "boundary_scrapes"
    );
    assert_eq!(server_counts(&j["metrics"], &url), prof);
}
