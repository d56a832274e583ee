//! The least a streaming client built on agentx's own HTTP stack (tokio's multi-thread runtime and
//! hyper-util's pooled client, as `agentx::client` sets it up) spends per token: N concurrent tasks,
//! each posting the same small streaming chat completion as `bench/floor.c` and reading the response
//! body frame by frame with no SSE decoding, no JSON, no timestamps and no records; the next request
//! goes out when the body ends. `bench/compare.py --hyper-floor` runs it beside `bench/floor.c`, so the
//! table separates what the stack costs from what agentx adds on top of it.
//!
//! With `--replay RUN_DIR` it is the floor of one agentx run's own traffic instead: every request of
//! the run's `records.jsonl` goes out at the same offset from the start (`send_ns`), with a prompt of
//! the same token count (`isl` words) and a streamed answer of the same length (`max_tokens` set to the
//! record's `osl`, with `ignore_eos`), on the same pooled client. The simulator then streams the same
//! tokens over the same number of open streams at each moment as in agentx's run, so the CPU per token
//! of the two differs only by what agentx does beyond moving those bytes (scheduling, bodies, SSE
//! decoding, records, metrics). The saturated mode keeps every connection busy instead, which spreads
//! each wake-up over more tokens than a replay with think times and joins gets. The first line of
//! standard output is `t0_wall_ns N`, the wall-clock instant of offset 0, so the caller can measure
//! the same window as agentx's.
//!
//!   agentx-bench-hyper-floor PORT CONNECTIONS SECONDS
//!   agentx-bench-hyper-floor PORT --replay RUN_DIR

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

const BODY: &str = concat!(
    r#"{"model":"bench-model","messages":[{"role":"user","content":"hello"}],"#,
    r#""max_tokens":300,"stream":true,"ignore_eos":true,"stream_options":{"include_usage":true}}"#
);

fn usage() -> ExitCode {
    eprintln!(
        "usage: agentx-bench-hyper-floor PORT CONNECTIONS SECONDS\n       agentx-bench-hyper-floor PORT --replay RUN_DIR"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [port, flag, run_dir] = args.as_slice() {
        if flag == "--replay" {
            let Ok(port) = port.parse::<u16>() else {
                return usage();
            };
            return replay::main(port, std::path::Path::new(run_dir));
        }
    }
    let [port, conns, secs] = args.as_slice() else {
        return usage();
    };
    let (Ok(port), Ok(conns), Ok(secs)) = (
        port.parse::<u16>(),
        conns.parse::<usize>(),
        secs.parse::<f64>(),
    ) else {
        return usage();
    };
    let Some(rt) = runtime() else {
        return ExitCode::FAILURE;
    };
    let uri = format!("http://127.0.0.1:{port}/v1/chat/completions");
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let failures = rt.block_on(async move {
        let client = client();
        let tasks = (0..conns)
            .map(|_| {
                let (client, uri) = (client.clone(), uri.clone());
                tokio::spawn(async move {
                    while Instant::now() < end {
                        stream_one(&client, &uri, Bytes::from_static(BODY.as_bytes())).await?;
                    }
                    Ok(())
                })
            })
            .collect();
        join(tasks).await
    });
    exit_code(&failures)
}

/// The multi-thread runtime with every driver, as agentx's.
fn runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            eprintln!("hyper-floor: cannot start the runtime: {e}");
            None
        }
    }
}

type Pooled = Client<HttpConnector, Full<Bytes>>;

/// hyper-util's pooled client, with `TCP_NODELAY`, as agentx's pool sets it up.
fn client() -> Pooled {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(usize::MAX)
        .build(http)
}

/// Posts `body` and reads the response body frame by frame to its end, parsing nothing.
async fn stream_one(client: &Pooled, uri: &str, body: Bytes) -> Result<(), String> {
    let req = Request::post(uri)
        .header("content-type", "application/json")
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    let mut response = client
        .request(req)
        .await
        .map_err(|e| e.to_string())?
        .into_body();
    while let Some(frame) = response.frame().await {
        frame.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Waits for every task; the failures, in task order.
async fn join(tasks: Vec<tokio::task::JoinHandle<Result<(), String>>>) -> Vec<String> {
    let mut failures = Vec::new();
    for task in tasks {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(e),
            Err(e) => failures.push(e.to_string()),
        }
    }
    failures
}

fn exit_code(failures: &[String]) -> ExitCode {
    match failures.first() {
        Some(first) => {
            eprintln!(
                "hyper-floor: {} requests failed; the first: {first}",
                failures.len()
            );
            ExitCode::FAILURE
        }
        None => ExitCode::SUCCESS,
    }
}

/// `--replay RUN_DIR`: one agentx run's requests, at their offsets and sizes.
mod replay {
    use std::path::Path;
    use std::process::ExitCode;
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    use bytes::Bytes;

    /// A prompt word: about the bytes of a synthesized word and its space (the simulator counts words).
    const WORD: &str = "word ";

    /// One request of the run: when it went out, its prompt tokens, the tokens it streamed.
    struct Sent {
        offset: Duration,
        prompt_tokens: usize,
        output_tokens: u64,
    }

    /// The requests of `RUN_DIR/records.jsonl` that streamed at least one token, by send offset.
    fn read_records(run_dir: &Path) -> Result<Vec<Sent>, String> {
        let path = run_dir.join("records.jsonl");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut sent = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let record: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| format!("{}:{}: not a record: {e}", path.display(), index + 1))?;
            let field = |name: &str| record.get(name).and_then(serde_json::Value::as_u64);
            let (Some(send_ns), Some(isl), Some(osl)) =
                (field("send_ns"), field("isl"), field("osl"))
            else {
                continue;
            };
            if osl > 0 {
                sent.push(Sent {
                    offset: Duration::from_nanos(send_ns),
                    prompt_tokens: isl as usize,
                    output_tokens: osl,
                });
            }
        }
        if sent.is_empty() {
            return Err(format!(
                "{} has no request that streamed a token",
                path.display()
            ));
        }
        sent.sort_by_key(|request| request.offset);
        Ok(sent)
    }

    /// The body of `request`: `prompt_tokens` words as one user message (a shared filler, sliced),
    /// `max_tokens` the record's output with `ignore_eos`.
    fn body(request: &Sent, filler: &Bytes) -> Bytes {
        let words = &filler[..(request.prompt_tokens * WORD.len()).min(filler.len())];
        let mut body = Vec::with_capacity(words.len() + 256);
        body.extend_from_slice(br#"{"model":"bench-model","messages":[{"role":"user","content":""#);
        body.extend_from_slice(words);
        body.extend_from_slice(
            format!(
                r#""}}],"max_tokens":{},"stream":true,"ignore_eos":true,"stream_options":{{"include_usage":true}}}}"#,
                request.output_tokens
            )
            .as_bytes(),
        );
        Bytes::from(body)
    }

    pub(super) fn main(port: u16, run_dir: &Path) -> ExitCode {
        let requests = match read_records(run_dir) {
            Ok(requests) => requests,
            Err(e) => {
                eprintln!("hyper-floor: {e}");
                return ExitCode::from(2);
            }
        };
        let longest = requests.iter().map(|r| r.prompt_tokens).max().unwrap_or(0);
        let filler = Bytes::from(WORD.repeat(longest));
        // The bodies are made before the clock starts: the floor sends, it does not build.
        let bodies: Vec<(Duration, Bytes)> = requests
            .iter()
            .map(|request| (request.offset, body(request, &filler)))
            .collect();
        drop(filler);
        let Some(rt) = super::runtime() else {
            return ExitCode::FAILURE;
        };
        let uri = format!("http://127.0.0.1:{port}/v1/chat/completions");
        let failures = rt.block_on(async move {
            let client = super::client();
            let start = Instant::now();
            let wall = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |since| since.as_nanos());
            println!("t0_wall_ns {wall}");
            let tasks = bodies
                .into_iter()
                .map(|(offset, body)| {
                    let (client, uri) = (client.clone(), uri.clone());
                    tokio::spawn(async move {
                        tokio::time::sleep_until((start + offset).into()).await;
                        super::stream_one(&client, &uri, body).await
                    })
                })
                .collect();
            super::join(tasks).await
        });
        super::exit_code(&failures)
    }
}
