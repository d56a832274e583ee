//! What a new user and a real server run into: context overflows during warmup, the pre-flight
//! check of the server, servers that close idle or used-up connections, and small-context corpora.
//! The real binary against the built-in simulator on port 0, or the library's client against a
//! scripted TCP server where a failure must happen at an exact moment.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

use agentx::client::{Client, ClientConfig, JsonBody, RequestIds};
use agentx::record::{Phase, RequestRecord};
use agentx::sim::{KeepAliveConfig, SimConfig};

use serde_json::Value;

use crate::support::{fixture, Run, Sim};

fn run_in(dir: tempfile::TempDir, args: &[&str]) -> Run {
    Run::exec(dir, args, &[])
}

/// `agentx-host run` against `url` on the fixture corpus (or `corpus`), plus `extra`.
fn replay(url: &str, model: &str, corpus: Option<&Path>, extra: &[&str]) -> Run {
    let corpus = corpus
        .map(Path::to_path_buf)
        .unwrap_or_else(|| fixture("traces-24.jsonl"));
    let corpus = corpus.to_str().unwrap();
    let mut args = vec![
        "run",
        "agentx-mvp",
        "--url",
        url,
        "--model",
        model,
        "--input-file",
        corpus,
        "--random-seed",
        "42",
        "--unsafe-override",
        "--streaming",
    ];
    args.extend_from_slice(extra);
    run_in(tempfile::tempdir().unwrap(), &args)
}

// ---- 1. context overflows during warmup ----

#[test]
fn a_warmup_overflow_recycles_the_lane_and_counts_towards_validity() {
    let mut cfg = SimConfig::max();
    // Start turns in 70-90 % of the fixture's traces are mostly above 30k tokens; their turn 0 is not.
    cfg.max_model_len = 30_000;
    let sim = Sim::start(cfg);
    let r = replay(
        &sim.url(),
        "agentx-sim",
        None,
        &[
            "--concurrency",
            "6",
            "--benchmark-duration",
            "3",
            "--ignore-trace-delays",
            "--trajectory-start-min-ratio",
            "0.7",
            "--trajectory-start-max-ratio",
            "0.9",
            "--failed-request-threshold",
            "0.05",
        ],
    );
    assert_eq!(
        r.code(),
        0,
        "a warmup overflow is no failure:\n{}",
        r.stderr()
    );
    let err = r.stderr();
    assert!(err.contains("Phase warmup complete: 6 returned"), "{err}");
    assert!(
        err.contains("pre-flight: the server serves `agentx-sim` with a context of 30000 tokens"),
        "{err}"
    );
    let recs = r.records();
    let warm: Vec<&RequestRecord> = recs.iter().filter(|x| x.phase == Phase::Warmup).collect();
    assert_eq!(warm.len(), 6);
    let over: Vec<&&RequestRecord> = warm.iter().filter(|x| x.context_overflow).collect();
    assert!(!over.is_empty(), "some warmup requests overflow");
    assert!(
        warm.iter().all(|x| x.error.is_none() || x.context_overflow),
        "no real warmup failure"
    );
    for o in &over {
        // The lane's trajectory ended at warmup: its first profiling request is turn 0 of the
        // recycle queue's next trace, in a new session.
        let first = recs
            .iter()
            .filter(|x| x.phase == Phase::Profiling && x.lane == o.lane)
            .min_by_key(|x| x.send_ns)
            .expect("the lane goes on in profiling");
        // (The queue holds every trace in dataset order, running ones included, so the head may be
        // the overflowed trace itself, now played from turn 0 with a new marker, as aiperf does.)
        assert_eq!(first.turn, 0, "{first:?}");
        assert_ne!(first.correlation_id, o.correlation_id);
        if first.trace_id == o.trace_id {
            assert!(first.recycle_pass > o.recycle_pass);
        }
        assert!(!recs
            .iter()
            .any(|x| x.phase == Phase::Profiling && x.correlation_id == o.correlation_id));
    }
    let summary = r.json("run_summary.json");
    assert_eq!(
        summary["summary"]["warmup_context_overflows"].as_u64(),
        Some(over.len() as u64)
    );
    assert_eq!(summary["stop"], "completed");
    let reasons = summary["submission_invalid_reasons"].as_array().unwrap();
    assert!(
        reasons
            .iter()
            .any(|x| x == "context_overflow_rate_exceeded"),
        "warmup overflows count towards the rate: {reasons:?}"
    );
    let agg = r.json("profile_export_aiperf.json");
    assert_eq!(
        agg["warmup_context_overflow_count"]["avg"].as_f64(),
        Some(over.len() as f64),
        "{agg:#}"
    );
}

// ---- 2. the pre-flight check ----

#[test]
fn preflight_names_the_served_model_and_exits_2_before_sending() {
    let sim = Sim::start(SimConfig::max());
    let r = replay(
        &sim.url(),
        "no-such-model",
        None,
        &["--concurrency", "2", "--benchmark-duration", "5"],
    );
    assert_eq!(r.code(), 2, "{}", r.stderr());
    let err = r.stderr();
    assert!(
        err.contains("serves `agentx-sim`; pass --model agentx-sim"),
        "{err}"
    );
    assert!(r.took < Duration::from_secs(20));
    assert_eq!(sim.requests(), 0, "nothing is sent before the check passes");
    assert!(
        !r.dir.path().join("artifacts").exists(),
        "nothing is written before the check passes"
    );
}

#[test]
fn preflight_reports_a_refused_connection_at_once_and_skip_preflight_goes_on() {
    // A port nobody listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let r = replay(
        &url,
        "m",
        None,
        &["--concurrency", "2", "--benchmark-duration", "5"],
    );
    assert_eq!(r.code(), 2, "{}", r.stderr());
    let err = r.stderr();
    assert!(
        err.contains(&format!("cannot reach the server at {url}/v1/models")),
        "{err}"
    );
    assert!(err.contains("--skip-preflight"), "{err}");
    // The check itself answers within a second; the rest is process start and dataset opening.
    assert!(r.took < Duration::from_secs(10), "{:?}", r.took);

    let r = replay(
        &url,
        "m",
        None,
        &[
            "--concurrency",
            "2",
            "--benchmark-duration",
            "5",
            "--skip-preflight",
            "--connect-timeout-seconds",
            "1",
        ],
    );
    assert_eq!(
        r.code(),
        1,
        "without the check, warmup fails: {}",
        r.stderr()
    );
    assert!(r.stderr().contains("warmup failed"), "{}", r.stderr());
}

/// Answers every request on one connection with `status` and `body`, then closes it.
fn one_shot_server(
    status: &'static str,
    body: &'static str,
) -> (String, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        l.set_nonblocking(false).unwrap();
        if let Ok((mut s, _)) = l.accept() {
            let _ = read_request(&mut s);
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, h)
}

#[test]
fn preflight_reports_401_with_the_url_and_the_fix() {
    let (url, h) = one_shot_server(
        "401 Unauthorized",
        r#"{"error":{"message":"invalid api key","type":"authentication_error"}}"#,
    );
    let r = replay(
        &url,
        "m",
        None,
        &["--concurrency", "2", "--benchmark-duration", "5"],
    );
    h.join().unwrap();
    assert_eq!(r.code(), 2, "{}", r.stderr());
    let err = r.stderr();
    assert!(err.contains("HTTP 401"), "{err}");
    assert!(err.contains("invalid api key"), "{err}");
    assert!(err.contains("--api-key-env"), "{err}");
}

// ---- 4. servers that close connections ----

/// Reads one HTTP/1.1 request (head and a `content-length` body); `None` at EOF.
fn read_request(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut r = BufReader::new(s);
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).ok()?;
    Some(body)
}

const SSE: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\" there\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n";

fn answer(s: &mut TcpStream) {
    let _ = write!(
        s,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{SSE}",
        SSE.len()
    );
    let _ = s.flush();
}

fn client(url: &str) -> Client {
    Client::new(&ClientConfig {
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(10),
        ..crate::support::chat_client_config(url)
    })
    .unwrap()
}

fn send(rt: &tokio::runtime::Runtime, c: &Client, n: usize) -> agentx::client::Exchange {
    rt.block_on(async {
        let (_tx, mut rx) = tokio::sync::watch::channel(false);
        let body = JsonBody::from_parts(vec![bytes::Bytes::from_static(
            br#"{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":2,"stream":true}"#,
        )]);
        c.send(
            body,
            RequestIds {
                request_id: &format!("r{n}"),
                correlation_id: "s0",
                parent_correlation_id: None,
                root_correlation_id: None,
                last: false,
                on_first_token: None,
            },
            true,
            &mut rx,
        )
        .await
    })
}

#[test]
fn a_request_lost_on_a_reused_connection_is_sent_once_more_on_a_new_one() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        // Connection 1 serves one request, then reads the next and closes without a byte of answer
        // (a server whose keep-alive ran out as the request arrived).
        let (mut a, _) = l.accept().unwrap();
        read_request(&mut a).unwrap();
        answer(&mut a);
        read_request(&mut a).unwrap();
        drop(a);
        // Connection 2 (the retry) serves it.
        let (mut b, _) = l.accept().unwrap();
        read_request(&mut b).unwrap();
        answer(&mut b);
        // Connection 3 answers the head, then breaks mid-body: that request is not sent again.
        let (mut c, _) = l.accept().unwrap();
        read_request(&mut c).unwrap();
        let _ = write!(
            c,
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 500\r\n\r\ndata: {{\"choices\":[{{\"delta\":{{\"content\":\"x\"}}}}]}}\n\n"
        );
        let _ = c.flush();
        drop(c);
        l.set_nonblocking(true).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(l.accept().is_err(), "no retry after a response byte");
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let c = client(&url);
    let first = send(&rt, &c, 1);
    assert!(first.failure.is_none(), "{:?}", first.failure);
    assert!(first.retried.is_none());
    let second = send(&rt, &c, 2);
    assert!(second.failure.is_none(), "{:?}", second.failure);
    let why = second.retried.expect("the retry is recorded");
    assert!(why.contains("reused connection"), "{why}");
    assert_eq!(second.text, "hi there");
    // The retry's connection was not kept: the next request opens connection 3.
    let third = send(&rt, &c, 3);
    let f = third
        .failure
        .expect("a stream cut after a byte is a failure");
    assert!(third.retried.is_none(), "{f:?}");
    server.join().unwrap();
}

#[test]
fn the_servers_keep_alive_timeout_and_max_are_honoured() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        // Every answer says `timeout=1, max=3`: the server would close a connection after 3
        // requests or 1 s idle. Returns the requests served on each connection the client opened.
        let mut per_conn = Vec::new();
        let mut served = 0;
        while served < 5 {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            let mut n = 0;
            while n < 3 && served < 5 {
                if read_request(&mut s).is_none() {
                    break;
                }
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nkeep-alive: timeout=1, max=3\r\ncontent-length: {}\r\n\r\n{SSE}",
                    SSE.len()
                );
                n += 1;
                served += 1;
            }
            per_conn.push(n);
        }
        per_conn
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let c = client(&url);
    let ok = |x: &agentx::client::Exchange| x.failure.is_none() && x.retried.is_none();
    // 1: connection A; its answer sets the idle deadline to 750 ms (the pool is replaced then, so A
    // is not used again).
    let first = send(&rt, &c, 1);
    assert!(ok(&first), "{first:?}");
    assert_eq!(c.idle_timeout(), Duration::from_millis(750));
    // 2: connection B.
    assert!(ok(&send(&rt, &c, 2)));
    // 3: after 900 ms idle, past our deadline and before the server's: B is retired, C opened.
    std::thread::sleep(Duration::from_millis(900));
    assert!(ok(&send(&rt, &c, 3)));
    // 4: C again, its second answer: retired one before the server's max of 3.
    assert!(ok(&send(&rt, &c, 4)));
    // 5: connection D.
    assert!(ok(&send(&rt, &c, 5)));
    assert_eq!(server.join().unwrap(), vec![1, 1, 2, 1]);
}

fn keep_alive_run(header: bool, extra: &[&str]) -> Run {
    let mut cfg = SimConfig::max();
    cfg.keep_alive = KeepAliveConfig {
        idle: Duration::from_secs(1),
        max: Some(5),
        header,
    };
    let sim = Sim::start(cfg);
    // Think times of 0.5-1.5 s around the server's 1 s idle limit.
    replay(
        &sim.url(),
        "agentx-sim",
        None,
        &[
            "--concurrency",
            "4",
            "--benchmark-duration",
            "8",
            "--inter-turn-delay-cap-seconds",
            "1.5",
            "--failed-request-threshold",
            "0.5",
        ]
        .iter()
        .chain(extra)
        .copied()
        .collect::<Vec<_>>(),
    )
}

#[test]
fn a_server_that_closes_idle_connections_after_1_s_loses_no_request() {
    // The pooled client with and without the server's Keep-Alive header, and sticky sessions (each
    // holding its own connection, which the server closes under it).
    let sticky: &[&str] = &["--connection-reuse-strategy", "sticky-user-sessions"];
    for (header, extra) in [(true, &[][..]), (false, &[][..]), (false, sticky)] {
        let r = keep_alive_run(header, extra);
        assert_eq!(r.code(), 0, "{}", r.stderr());
        let recs = r.records();
        assert!(recs.len() > 8, "{}", recs.len());
        let failed: Vec<_> = recs
            .iter()
            .filter(|x| x.error.is_some() && !x.cancelled)
            .collect();
        assert!(
            failed.is_empty(),
            "keep-alive header {header} {extra:?}: {failed:#?}"
        );
        if header {
            assert!(
                r.stderr().contains("Keep-Alive: timeout=1"),
                "the learned timeout is logged: {}",
                r.stderr()
            );
        }
    }
}

// ---- 5. small-context corpora ----

#[test]
fn synth_context_scales_the_corpus_to_a_small_server() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("t.jsonl");
    let r = run_in(
        tempfile::tempdir().unwrap(),
        &[
            "dataset",
            "synth",
            "--traces",
            "60",
            "--seed",
            "5",
            "--context",
            "4096",
            "-o",
            corpus.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let mut fit = 0;
    let mut total = 0;
    for line in std::fs::read_to_string(&corpus).unwrap().lines() {
        let t: Value = serde_json::from_str(line).unwrap();
        let prefix = t["tool_tokens"].as_u64().unwrap() + t["system_tokens"].as_u64().unwrap();
        assert!((100..=400).contains(&prefix), "scaled prefix {prefix}");
        let reqs = t["requests"].as_array().unwrap();
        let first = reqs[0]["in"].as_u64().unwrap();
        assert!(first > prefix, "first request {first}");
        let peak = reqs
            .iter()
            .map(|q| q["in"].as_u64().unwrap() + q["out"].as_u64().unwrap())
            .max()
            .unwrap();
        total += 1;
        if peak <= 4096 {
            fit += 1;
        }
        // Outputs stay long enough to measure streaming.
        let outs: Vec<u64> = reqs.iter().map(|q| q["out"].as_u64().unwrap()).collect();
        assert!(outs.iter().any(|&o| o >= 10));
    }
    assert!(fit * 100 >= total * 80, "most traces fit: {fit}/{total}");
    assert!(fit < total, "a few grow past the context: {fit}/{total}");

    // And it replays against a 4k server: overflows are counted, nothing fails.
    let mut cfg = SimConfig::max();
    cfg.max_model_len = 4096;
    let sim = Sim::start(cfg);
    let r = replay(
        &sim.url(),
        "agentx-sim",
        Some(&corpus),
        &[
            "--concurrency",
            "8",
            "--benchmark-duration",
            "3",
            "--ignore-trace-delays",
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let recs = r.records();
    assert!(
        recs.iter()
            .filter(|x| agentx::metrics::Outcome::of(x).is_ok())
            .count()
            > 20
    );
    assert!(recs
        .iter()
        .all(|x| x.error.is_none() || x.context_overflow || x.cancelled));

    // Too small a context, or --max-isl below the full-size prefix, is refused with the fix.
    for (flags, says) in [
        (["--context", "500"], "--context 500"),
        (["--max-isl", "8000"], "--context N"),
    ] {
        let mut args = vec!["dataset", "synth", "--traces", "2", "-o", "x.jsonl"];
        args.extend(flags);
        let r = run_in(tempfile::tempdir().unwrap(), &args);
        assert_eq!(r.code(), 2);
        assert!(r.stderr().contains(says), "{}", r.stderr());
    }
}
