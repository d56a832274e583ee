//! Streamed tokens per second the simulator serves at `--speed max`, per CPU core.
//!
//! The server runs on its own single-threaded tokio runtime on a dedicated thread
//! ([`agentx::sim::SimThread`]), so its CPU time is exactly that thread's; a hyper client on another thread
//! keeps 1, 64 and 1024 streams busy (one keep-alive connection each, requests back to back,
//! `ignore_eos` so every request streams exactly `--tokens` one-token chunks). Every response is
//! checked to end with the usage chunk and `[DONE]`.
//!
//! Run: `cargo bench --bench sim_throughput [-- --secs 3 --tokens 1000 --conc 1,64,1024]`.
//! Target: at least 500,000 tokens/s per server core at every concurrency.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentx::sim::{SimConfig, SimThread};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use nix::sys::resource::{getrlimit, getrusage, setrlimit, Resource, Usage, UsageWho};

fn cpu_secs(u: &Usage) -> f64 {
    let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
    t(u.user_time()) + t(u.system_time())
}

struct Opts {
    secs: f64,
    tokens: u64,
    conc: Vec<usize>,
}

fn opts() -> Opts {
    let mut o = Opts {
        secs: 3.0,
        tokens: 1000,
        conc: vec![1, 64, 1024],
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let v = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--secs" => o.secs = v.parse().expect("--secs takes seconds, e.g. 3"),
            "--tokens" => o.tokens = v.parse().expect("--tokens takes a count, e.g. 1000"),
            "--conc" => {
                o.conc = v
                    .split(',')
                    .map(|c| c.parse().expect("--conc takes a list, e.g. 1,64,1024"))
                    .collect();
            }
            // `cargo bench` passes `--bench`; ignore anything else.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    o
}

/// Keep one connection busy until `stop`; returns tokens received.
async fn stream_loop(addr: SocketAddr, body: Bytes, tokens: u64, stop: Arc<AtomicBool>) -> u64 {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).ok();
    let (mut tx, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let want = format!("\"completion_tokens\":{tokens},");
    let mut got = 0;
    let mut tail: Vec<u8> = Vec::with_capacity(1024);
    while !stop.load(Relaxed) {
        tx.ready().await.expect("connection ready");
        let req = hyper::Request::post("/v1/chat/completions")
            .header("host", "sim")
            .header("content-type", "application/json")
            .body(Full::new(body.clone()))
            .unwrap();
        let resp = tx.send_request(req).await.expect("send");
        assert_eq!(resp.status(), 200);
        let mut b = resp.into_body();
        tail.clear();
        while let Some(f) = b.frame().await {
            let f = f.expect("body frame");
            if let Some(d) = f.data_ref() {
                // Keep only the end of the stream: the usage chunk and [DONE].
                if d.len() >= 512 {
                    tail.clear();
                    tail.extend_from_slice(&d[d.len() - 512..]);
                } else {
                    tail.extend_from_slice(d);
                    if tail.len() > 2048 {
                        tail.drain(..tail.len() - 512);
                    }
                }
            }
        }
        let t = String::from_utf8_lossy(&tail);
        assert!(
            t.ends_with("data: [DONE]\n\n"),
            "stream did not end with [DONE]"
        );
        assert!(t.contains(&want), "usage chunk missing {want}");
        got += tokens;
    }
    got
}

fn main() {
    let o = opts();
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }

    // The server: one thread, one current-thread runtime.
    let server = SimThread::start(SimConfig::max()).expect("start the simulator");
    let addr = server.addr();
    let server_cpu = || {
        server
            .cpu_seconds()
            .expect("the server thread's CPU time (/proc/thread-self/schedstat)")
    };

    let prompt: String = (0..200).fold(String::new(), |mut prompt, i| {
        use std::fmt::Write;
        let _ = write!(prompt, "w{i} ");
        prompt
    });
    let body = Bytes::from(
        serde_json::json!({
            "model": "bench",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": o.tokens,
            "ignore_eos": true,
            "stream": true,
            "stream_options": {"include_usage": true},
        })
        .to_string(),
    );

    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "sim_throughput: --preset max, {} tokens per request (one token per SSE chunk), {} s per level",
        o.tokens, o.secs
    );
    println!(
        "{:>7} {:>12} {:>14} {:>14} {:>22} {:>22}",
        "streams",
        "tokens",
        "tokens/s",
        "server cpu s",
        "tokens/s/server-core",
        "tokens/s/process-core"
    );
    let mut worst = f64::INFINITY;
    for &c in &o.conc {
        let stop = Arc::new(AtomicBool::new(false));
        let total = Arc::new(AtomicU64::new(0));
        let s0 = server_cpu();
        let p0 = cpu_secs(&getrusage(UsageWho::RUSAGE_SELF).unwrap());
        let t0 = Instant::now();
        client.block_on(async {
            let mut tasks = Vec::with_capacity(c);
            for _ in 0..c {
                let (stop, body, total) = (stop.clone(), body.clone(), total.clone());
                tasks.push(tokio::spawn(async move {
                    let n = stream_loop(addr, body, o.tokens, stop).await;
                    total.fetch_add(n, Relaxed);
                }));
            }
            tokio::time::sleep(Duration::from_secs_f64(o.secs)).await;
            stop.store(true, Relaxed);
            for t in tasks {
                t.await.expect("client task");
            }
        });
        let wall = t0.elapsed().as_secs_f64();
        let s1 = server_cpu();
        let p1 = cpu_secs(&getrusage(UsageWho::RUSAGE_SELF).unwrap());
        let tokens = total.load(Relaxed) as f64;
        let per_server_core = tokens / (s1 - s0);
        worst = worst.min(per_server_core);
        println!(
            "{:>7} {:>12} {:>14.0} {:>14.3} {:>22.0} {:>22.0}",
            c,
            tokens as u64,
            tokens / wall,
            s1 - s0,
            per_server_core,
            tokens / (p1 - p0),
        );
    }
    println!(
        "lowest: {worst:.0} tokens/s per server core (target 500000): {}",
        if worst >= 500_000.0 { "met" } else { "NOT met" }
    );
    drop(server);
}
